"""One run per place, whatever path reaches it (issue 58, point 1).

Every command that writes a model, trial or data dir, a results file or an export holds a lock
on the real place it writes (util/place_locks.py): a second run reaching it under another name
(a symlink, `..`, `//`, another spelling of a URL) is refused naming the place and the owner.
Readers of a model that is being trained read a complete checkpoint: when a save prunes the one
they chose (keep_checkpoint_max), they read the then-newest one instead of failing with
"checkpoint ... not found". The prune is simulated deterministically: checkpoint.load, patched,
lets a "training run" save a newer checkpoint and prune the older ones just before the k-th read.
"""
import json
import logging
import os
import shutil
import time

import numpy as np
import pytest

import build_pretraining_dataset
import export_model
import predict
import pretrain_fixtures as fx
import run_finetuning
import run_pretraining
import score_text
from tools import two_stage_init
from util import checkpoint, fs, io_utils, place_locks
from util import training_utils as tu
from util.place_locks import Place

from tests.test_finetune_data import write_fixtures
from tests.test_interop_hf import pretrained_dir, trial_dir


def hold(place: Place) -> str:
    """Makes `place` look locked by another live run on this host (our parent process)."""
    lock = place_locks.lock_for(place)
    os.makedirs(os.path.dirname(lock.path), exist_ok=True)
    with open(lock.path, "w") as f:
        json.dump({"pid": os.getppid(), "host": lock.host, "started": time.time()}, f)
    return lock.path


def in_use(caplog, what: str) -> bool:
    return f"in use by another run (pid {os.getppid()}" in caplog.text and what in caplog.text


# -- the lock itself --------------------------------------------------------------------------


def test_a_url_lock_is_one_lock_however_the_url_is_spelled():
    # gs://b//m and gs://b/m/ are one model dir to every check; their lock files were two.
    first = tu.RunLock("ram://lock-spelling//m")
    assert first.path == tu.RunLock("ram://lock-spelling/m/").path
    with first:
        with pytest.raises(tu.RunLockError, match="already in use by this run"):
            tu.RunLock("ram://lock-spelling/./m").acquire()


def test_two_outputs_of_one_run_that_are_one_place_are_refused(tmp_path):
    os.symlink(tmp_path / "a", tmp_path / "b")
    with pytest.raises(tu.RunLockError, match="already in use by this run"):
        with place_locks.holding([Place("first", str(tmp_path / "a"), True),
                                  Place("second", str(tmp_path / "b"), True)]):
            pass
    assert not os.path.exists(tmp_path / "a" / ".run.lock")  # the first one was released


# -- run_finetuning.py ------------------------------------------------------------------------


def _finetuning_data(tmp_path) -> None:
    write_fixtures(tmp_path, tasks={"sst"})
    (tmp_path / "vocab.txt").write_text("\n".join(
        ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "movie"]) + "\n")


def _finetune(tmp_path, **hparams) -> int:
    hparams = dict({"task_names": ["sst"], "init_checkpoint": "", "vocab_size": 7,
                    "max_seq_length": 8}, **hparams)
    return run_finetuning.main(["--data-dir", str(tmp_path), "--model-name", "m",
                                "--hparams", json.dumps(hparams)])


def _trial_reached_by_a_symlink(tmp_path) -> tuple[str, dict]:
    runs = tmp_path / "models" / "m" / "finetuning_models"
    runs.mkdir(parents=True)
    (tmp_path / "other_run_1").mkdir()
    os.symlink(tmp_path / "other_run_1", runs / "sst_model_1")
    return hold(Place("trial", str(tmp_path / "other_run_1"), True)), {}


def _cache_reached_by_a_symlink(tmp_path) -> tuple[str, dict]:
    (tmp_path / "cache").mkdir()
    os.symlink(tmp_path / "cache", tmp_path / "cache_link")
    return hold(Place("cache", str(tmp_path / "cache"), True)), {
        "preprocessed_data_dir": str(tmp_path / "cache_link")}


def _results_reached_through_dot_dot(tmp_path) -> tuple[str, dict]:
    (tmp_path / "x").mkdir()
    return hold(Place("results", str(tmp_path / "r.json"), False)), {
        "results_json": str(tmp_path / "x" / ".." / "r.json")}


@pytest.mark.parametrize("setup", [_trial_reached_by_a_symlink, _cache_reached_by_a_symlink,
                                   _results_reached_through_dot_dot])
def test_finetuning_refuses_a_place_another_run_writes_under_another_name(tmp_path, caplog,
                                                                           setup):
    # The lock beside model_dir guarded the name, not the trial dir, cache or results it writes.
    _finetuning_data(tmp_path)
    lock_path, hparams = setup(tmp_path)
    assert _finetune(tmp_path, **hparams) == 2
    assert in_use(caplog, lock_path)
    assert not os.path.exists(tmp_path / "other_run_1" / "finetune_config.json")


# -- run_pretraining.py -----------------------------------------------------------------------


def _pretrain(data: str, **hparams) -> int:
    return run_pretraining.main(["--data-dir", data, "--model-name", "tiny", "--hparams",
                                 json.dumps(fx.tiny_hparams(**hparams))])


def test_pretraining_results_outside_the_model_dir_are_locked_where_they_are(tmp_path, caplog):
    data = fx.write_data(str(tmp_path / "data"))
    (tmp_path / "shared").mkdir()
    os.symlink(tmp_path / "shared", tmp_path / "link")
    lock_path = hold(Place("results", str(tmp_path / "shared" / "r.json"), False))
    assert _pretrain(data, results_json=str(tmp_path / "link" / "r.json")) == 2
    assert in_use(caplog, lock_path)


def test_an_eval_only_run_does_not_write_into_a_model_dir_being_trained(tmp_path, caplog):
    # It writes results and summaries there: it used to run beside the training run unlocked.
    data = fx.write_data(str(tmp_path / "data"))
    lock_path = hold(Place("model dir", os.path.join(data, "models", "tiny"), True))
    assert _pretrain(data, do_train=False, do_eval=True) == 2
    assert in_use(caplog, lock_path)


# -- export_model.py --------------------------------------------------------------------------


def test_export_refuses_an_output_another_export_writes_under_another_name(model, tmp_path,
                                                                           caplog):
    # An export held no lock at all: two exports of one --output replaced each other's files.
    (tmp_path / "real").mkdir()
    os.symlink(tmp_path / "real", tmp_path / "link")
    lock_path = hold(Place("--output", str(tmp_path / "real" / "hf"), False))
    assert export_model.main(["--model-dir", model[0], "--format", "huggingface",
                              "--output", str(tmp_path / "link" / "hf")]) == 2
    assert in_use(caplog, lock_path) and not os.path.exists(tmp_path / "real" / "hf")


def test_export_to_a_symlinked_output_replaces_what_it_points_to(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "old.txt").write_text("old")
    os.symlink(tmp_path / "real", tmp_path / "link")
    with export_model.atomic_output_dir(str(tmp_path / "link"), overwrite=True) as tmp:
        with open(os.path.join(tmp, "new.txt"), "w") as f:
            f.write("new")
    assert os.path.islink(tmp_path / "link")  # still the user's link, to the new export
    assert os.listdir(tmp_path / "link") == ["new.txt"]
    assert sorted(os.listdir(tmp_path)) == ["link", "real"]


# -- build_pretraining_dataset.py -------------------------------------------------------------


def test_a_build_is_refused_on_an_output_dir_another_build_writes_under_another_url(tmp_path,
                                                                                  capsys):
    # A lease of a run on another host (object stores have no exclusive create), met through
    # another spelling of the same gs:// or ram:// directory.
    lock = tu.RunLock("ram://build-spelling/out", filename=".build.lock")
    with io_utils.atomic_open(lock.path) as f:
        json.dump({"pid": 7, "host": "elsewhere", "started": time.time(),
                   "refreshed": time.time()}, f)
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "a.txt").write_text("w1 w2 w3.\nw4 w5 w6.\n\nw7 w8.\n")
    fx.write_vocab(str(tmp_path / "vocab.txt"))
    assert build_pretraining_dataset.main([
        "--corpus-dir", str(tmp_path / "corpus"), "--vocab-file", str(tmp_path / "vocab.txt"),
        "--output-dir", "ram://build-spelling//out/", "--max-seq-length", "16",
        "--num-out-files", "2", "--no-progress"]) == 2
    assert "in use by another run (pid 7 on host elsewhere" in capsys.readouterr().err
    assert fs.listdir("ram://build-spelling/out") == [".build.lock"]


# -- readers of a model being trained ---------------------------------------------------------


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    root = tmp_path_factory.mktemp("trained")
    source = pretrained_dir(root)
    return source, trial_dir(root, source)


def copy_of(path: str, tmp_path) -> str:
    """A copy of a model dir, at the same depth below a models/ dir (a trial finds its
    vocabulary two levels up)."""
    target = tmp_path / "models" / "m"
    if path.endswith("_1"):
        shutil.copytree(os.path.dirname(os.path.dirname(path)), target)
        return str(target / "finetuning_models" / os.path.basename(path))
    shutil.copytree(path, target)
    return str(target)


class Rotation:
    """checkpoint.load patched: just before its `at`-th call, a training run in the model dir
    saves the next step and prunes every older checkpoint (keep_checkpoint_max 1)."""

    def __init__(self, monkeypatch, at: int):
        self.real, self.at, self.calls, self.pruned = checkpoint.load, at, 0, None
        monkeypatch.setattr(checkpoint, "load", self)

    def __call__(self, prefix: str):
        self.calls += 1
        if self.calls == self.at:
            reader = self.real(prefix)
            tensors = {n: reader.get_tensor(n) for n in reader.get_variable_to_shape_map()}
            step = int(prefix.rsplit("-", 1)[1]) + 1
            tensors["global_step"] = np.int64(step)
            checkpoint.CheckpointManager(os.path.dirname(prefix), max_to_keep=1).save(
                tensors, step)
            self.pruned = prefix
        return self.real(prefix)


@pytest.mark.parametrize("at", [1, 2])  # the check of the newest, the read of its tensors
def test_export_reads_the_newest_checkpoint_when_a_save_prunes_the_chosen_one(
        model, tmp_path, monkeypatch, caplog, at):
    caplog.set_level(logging.INFO)
    source = copy_of(model[0], tmp_path)
    rotation = Rotation(monkeypatch, at)
    assert export_model.main(["--model-dir", source, "--format", "huggingface",
                              "--output", str(tmp_path / "hf")]) == 0, caplog.text
    assert rotation.pruned and "model.ckpt-8" in caplog.text  # exported from the newer one


@pytest.mark.parametrize("at", [1, 2, 3])  # the check, the names, the weights
def test_score_text_reads_the_newest_checkpoint_when_a_save_prunes_the_chosen_one(
        model, tmp_path, monkeypatch, caplog, capsys, at):
    source = copy_of(model[0], tmp_path)
    rotation = Rotation(monkeypatch, at)
    assert score_text.main(["--model-dir", source, "--json", "w1 w2 w3"]) == 0, caplog.text
    assert rotation.pruned and json.loads(capsys.readouterr().out)["tokens"]


@pytest.mark.parametrize("at", [1, 2])  # the check, the weights
def test_predict_reads_the_newest_checkpoint_when_a_save_prunes_the_chosen_one(
        model, tmp_path, monkeypatch, caplog, at):
    trial = copy_of(model[1], tmp_path)
    (tmp_path / "in.tsv").write_text("text_a\ttext_b\nw1 w2\tw3 w4\n")
    rotation = Rotation(monkeypatch, at)
    assert predict.main(["--model-dir", trial, "--input", str(tmp_path / "in.tsv"), "--output",
                         str(tmp_path / "out.jsonl"), "--no-progress"]) == 0, caplog.text
    assert rotation.pruned and (tmp_path / "out.jsonl").read_text().count("\n") == 1


@pytest.mark.parametrize("at", [1, 2])
def test_reading_a_model_dir_by_path_survives_a_prune(model, tmp_path, monkeypatch, at):
    # checkpoint.read_all / restore of a directory (init_checkpoint, tools), two_stage_init.
    source = copy_of(model[0], tmp_path)
    rotation = Rotation(monkeypatch, at)
    assert int(checkpoint.read_all(source)["global_step"]) == 8 and rotation.pruned
    rotation = Rotation(monkeypatch, at)
    two_stage_init.make_two_stage_init(source, str(tmp_path / "init" / "model.ckpt-0"))
    assert rotation.pruned


def test_a_named_checkpoint_pruned_while_read_is_an_error_saying_so(model, tmp_path,
                                                                     monkeypatch):
    source = copy_of(model[0], tmp_path)
    Rotation(monkeypatch, 1)
    with pytest.raises(FileNotFoundError, match="was deleted while it was being read"):
        checkpoint.read_all(os.path.join(source, "model.ckpt-7"))
