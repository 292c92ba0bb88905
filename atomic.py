"""Writing files so that nothing is ever half-written (machinery; no paper section).

Checkpoints, tokenizers, GLUE results and plots all go through atomic_write: the content is
written to a hidden temporary file beside the target and renamed over it at the end. A rename
within one folder is atomic, so a reader - or a crash, or Ctrl-C mid-write - sees either the
old file or the complete new one, never a truncated one.
"""
import os
from pathlib import Path


def atomic_write(path, write):
    """Call write(tmp_path) to produce the content, then move it into place at `path`."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
