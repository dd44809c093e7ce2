"""Every output gets the mode a plain open() or mkdir would give it under the user's umask:
exports, atomic writes, TensorBoard dirs, lock files (util/file_modes.py)."""
import os
import stat

import pytest

import export_model
from tests.test_interop_hf import pretrained_dir, trial_dir
from util import file_modes, fs, io_utils, training_utils


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.fixture
def umask():
    """Sets a group-friendly umask for the test, the old one back after it."""
    old = os.umask(0o002)
    yield 0o002
    os.umask(old)


def test_umask_is_read_without_being_set(umask, monkeypatch):
    """os.umask can only read the umask by setting it: a thread creating a file meanwhile
    would get the temporary value."""
    def refuse(_):
        raise AssertionError("os.umask called")

    monkeypatch.setattr(os, "umask", refuse)
    assert file_modes.umask() == umask
    assert file_modes._umask_from_a_probe() == umask


def test_atomic_writes_get_the_mode_of_a_plain_open(tmp_path, umask, monkeypatch):
    monkeypatch.setattr(os, "umask", lambda _: pytest.fail("os.umask called"))
    io_utils.write_text(str(tmp_path / "a.txt"), "x")
    io_utils.copy_file(str(tmp_path / "a.txt"), str(tmp_path / "b.txt"))
    assert mode(tmp_path / "a.txt") == mode(tmp_path / "b.txt") == 0o664


def tree_modes(top) -> dict[str, int]:
    return {os.path.relpath(os.path.join(root, name), top) or ".": mode(os.path.join(root, name))
            for root, dirs, files in os.walk(top) for name in dirs + files} | {".": mode(top)}


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    return pretrained_dir(tmp_path_factory.mktemp("pretrained"))


@pytest.mark.parametrize("kind", ["discriminator", "generator"])
def test_hugging_face_export_is_readable_by_the_group(source, tmp_path, umask, kind):
    """mkdtemp made the export directory 0700: the owner's alone, whatever the umask."""
    output = tmp_path / "hf"
    assert export_model.main(["--model-dir", source, "--format", "huggingface", "--model", kind,
                              "--output", str(output)]) == 0
    modes = tree_modes(output)
    assert modes.pop(".") == 0o775
    assert set(modes.values()) == {0o664}, modes


def test_import_writes_a_model_dir_readable_by_the_group(source, tmp_path, umask):
    assert export_model.main(["--model-dir", source, "--format", "huggingface",
                              "--output", str(tmp_path / "hf")]) == 0
    assert export_model.main(["--import-dir", str(tmp_path / "hf"), "--format", "huggingface",
                              "--output", str(tmp_path / "imported")]) == 0
    modes = tree_modes(tmp_path / "imported")
    assert modes.pop(".") == 0o775
    assert set(modes.values()) == {0o664}, modes


def test_saved_model_directories_follow_the_umask(source, tmp_path, umask):
    """TensorFlow makes a SavedModel's variables/ and assets/ 0755 whatever the umask."""
    trial = trial_dir(tmp_path, source, task="sst", labels=2)
    output = tmp_path / "served"
    assert export_model.main(["--model-dir", trial, "--format", "saved_model",
                              "--vocab-file", os.path.join(source, "vocab.txt"),
                              "--output", str(output)]) == 0
    modes = tree_modes(output)
    directories = {p for p in modes if os.path.isdir(output / p)}
    assert {".", "variables"} <= directories
    assert {modes[p] for p in directories} == {0o775}, modes
    assert {modes[p] for p in set(modes) - directories} == {0o664}, modes


def test_tensorboard_dir_follows_the_umask(tmp_path, umask):
    """tf.summary makes a missing log dir 0755 whatever the umask (a trial's eval/)."""
    writer = training_utils.SummaryWriter(str(tmp_path / "trial" / "eval"))
    writer.scalars(1, {"loss": 1.0})
    writer.flush()
    assert mode(tmp_path / "trial") == mode(tmp_path / "trial" / "eval") == 0o775
    assert {mode(p) for p in (tmp_path / "trial" / "eval").iterdir()} == {0o664}


def test_lock_file_made_without_hard_links_has_open_mode(tmp_path, umask, monkeypatch):
    def no_links(*_):
        raise OSError("hard links unsupported")

    monkeypatch.setattr(os, "link", no_links)
    lock = training_utils.RunLock(str(tmp_path))
    lock.acquire()
    try:
        assert mode(lock.path) == 0o664
    finally:
        lock.release()


def test_file_url_directories_follow_the_umask(tmp_path, umask):
    fs.makedirs(f"file://{tmp_path}/a/b")
    assert mode(tmp_path / "a") == mode(tmp_path / "a" / "b") == 0o775

