"""atomic_write (machinery/atomic.py): the old file or the whole new one, never a part, even after a crash."""
import os

import pytest

from machinery import atomic


def test_content_reaches_the_disk_before_the_rename(tmp_path, monkeypatch):
    """The temporary's data is flushed before it takes the target's name; then the folder."""
    events, fsync, replace = [], os.fsync, os.replace
    monkeypatch.setattr(atomic.os, "fsync", lambda fd: (events.append(
        ("fsync", os.path.realpath(f"/proc/self/fd/{fd}"))), fsync(fd)))
    monkeypatch.setattr(atomic.os, "replace", lambda a, b: (events.append(("replace", str(b))),
                                                            replace(a, b)))
    target = tmp_path / "ckpt.pt"
    atomic.atomic_write(target, lambda tmp: open(tmp, "w").write("new"))
    assert target.read_text() == "new"
    if not os.path.isdir("/proc/self/fd"):
        pytest.skip("no /proc: the order is checked on Linux")
    kinds = [k for k, _ in events]
    assert kinds == ["fsync", "replace", "fsync"], events
    assert events[0][1].startswith(str(tmp_path / ".ckpt.pt.tmp-"))   # the data, not the folder
    assert events[2][1] == str(tmp_path)                               # then the rename


def test_a_failed_write_keeps_the_old_file_and_leaves_nothing(tmp_path):
    target = tmp_path / "ckpt.pt"
    target.write_text("old")

    def write(tmp):
        open(tmp, "w").write("half")
        raise OSError(28, "No space left on device")
    with pytest.raises(OSError):
        atomic.atomic_write(target, write)
    assert target.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt.pt"]
