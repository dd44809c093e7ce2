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
