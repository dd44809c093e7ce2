"""Atomic writes: all or nothing, usual file mode, readable JSON errors."""
import os
import stat

import pytest

from util import io_utils


def test_atomic_write_replaces_whole_file_and_leaves_no_temporaries(tmp_path):
    path = tmp_path / "results.json"
    io_utils.write_json(str(path), {"a": 1})
    io_utils.write_json(str(path), {"a": 2})
    assert io_utils.read_json(str(path)) == {"a": 2}
    assert os.listdir(tmp_path) == ["results.json"]
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o666 & ~umask


def test_failed_write_keeps_the_previous_file(tmp_path):
    path = tmp_path / "out.txt"
    io_utils.write_text(str(path), "old")
    with pytest.raises(RuntimeError):
        with io_utils.atomic_open(str(path)) as f:
            f.write("partial")
            raise RuntimeError("crash mid-write")
    assert path.read_text() == "old"
    assert os.listdir(tmp_path) == ["out.txt"]


def test_bad_json_names_file_line_and_column(tmp_path):
    path = tmp_path / "h.json"
    path.write_text('{\n  "a": 1,\n  "b": oops\n}')
    with pytest.raises(ValueError, match=r"h.json:3:8: invalid JSON"):
        io_utils.read_json(str(path))


def test_next_write_removes_what_a_killed_writer_left_and_spares_live_writers(tmp_path):
    import subprocess
    import sys
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    dead_pid = int(dead.stdout)  # that process has exited
    path = tmp_path / "results.json"
    killed = tmp_path / f".results.json.{dead_pid}.abc123_x.tmp"
    live = tmp_path / f".results.json.{os.getppid()}.def456_y.tmp"  # a writer still running
    other = tmp_path / f".other.json.{dead_pid}.abc123_x.tmp"  # another file's temporary
    for p in (killed, live, other):
        p.write_text("{partial")
    io_utils.write_json(str(path), {"a": 1})
    assert io_utils.read_json(str(path)) == {"a": 1}
    assert not killed.exists()
    assert live.exists() and other.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [path.name, live.name, other.name])
