"""Writing files so that nothing is ever half-written (machinery; no paper section).

Checkpoints, tokenizers, GLUE results and plots all go through atomic_write: the content is
written to a hidden temporary file beside the target and renamed over it at the end. A rename
within one folder is atomic, so a reader - or a crash, or Ctrl-C mid-write - sees either the
old file or the complete new one, never a truncated one. The content is flushed to the disk
(fsync) before the rename: otherwise a power cut soon after could leave the new name pointing
at a file whose data never reached the disk - an empty ckpt.pt where a good one used to be.
"""
import os
from pathlib import Path


def atomic_write(path, write):
    """Call write(tmp_path) to produce the content, then move it into place at `path`."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        write(tmp)
        _fsync(tmp)
        os.replace(tmp, path)
        _fsync(path.parent)             # the rename itself, recorded in the folder
    finally:
        if tmp.exists():
            tmp.unlink()


def _fsync(path):
    """Flush a file's (or a folder's) data to the disk. Folders cannot be opened on every
    system (Windows), and some file systems refuse fsync on them: that part is best effort."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        if Path(path).is_dir():
            return
        raise
    try:
        os.fsync(fd)
    except OSError:
        if not Path(path).is_dir():
            raise
    finally:
        os.close(fd)
