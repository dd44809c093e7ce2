"""Faults a long run meets: torn or corrupted checkpoints, a save interrupted at any point, a full or
read-only disk, NaN/Inf, and run locks (live, stale, half-written, reused pids).

Kill-and-resume with real SIGKILLs is in test_reliability_kill.py; bad inputs in
test_reliability_inputs.py.
"""
import errno
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import types

import numpy as np
import pytest
import tensorflow as tf

import configure_finetuning
import predict
import preloaded
import pretrain_fixtures as fx
import run_finetuning
import run_pretraining
from configure_pretraining import PretrainingConfig
from finetune import preprocessing, task_builder
from tools.kill_resume import KillHook
from util import checkpoint, fs, io_utils
from util import training_utils as tu

from tests.test_finetune_data import write_fixtures

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def tensors(step: int, size: int = 50) -> dict:
    rng = np.random.RandomState(step)
    return {"electra/w": rng.randn(size).astype(np.float32), "adam_m": rng.randn(size // 2),
            "global_step": np.int64(step)}


def files(directory) -> list[str]:
    return sorted(os.listdir(directory))


# -- checkpoints ------------------------------------------------------------------------------


class Killed(BaseException):
    """Stands for SIGKILL in-process: nothing in the save path catches a BaseException."""


def _interrupted_save(directory: str, step: int, ordinal: int) -> str | None:
    """Runs manager.save(step) until the `ordinal`-th rename/delete; returns where it stopped."""
    def die():
        raise Killed()

    hook = KillHook(directory, "*", "any", ordinal, action=die).install()
    try:
        checkpoint.CheckpointManager(directory, max_to_keep=2).save(tensors(step), step)
    except Killed:
        return hook.fired
    finally:
        hook.uninstall()
    return None


def test_a_save_killed_at_any_point_leaves_a_consistent_dir(tmp_path, caplog):
    base = tmp_path / "base"
    manager = checkpoint.CheckpointManager(str(base), max_to_keep=2)
    for step in (1, 2, 3):
        manager.save(tensors(step), step)
    points = []
    for ordinal in range(1, 20):
        work = tmp_path / f"k{ordinal}"
        shutil.copytree(base, work)
        where = _interrupted_save(str(work), 4, ordinal)
        if where is None:
            break
        points.append(where)
        # What a restarted run sees: the newest checkpoint that is complete, never a torn one.
        latest = checkpoint.CheckpointManager(str(work)).latest()
        step = int(latest.rsplit("-", 1)[1])
        assert step in (3, 4), where
        got = checkpoint.read_all(latest)
        for name, value in tensors(step).items():
            np.testing.assert_array_equal(got[name], value, err_msg=where)
        # The restarted run saves again: the dir ends with exactly the newest two, no debris.
        resumed = checkpoint.CheckpointManager(str(work), max_to_keep=2)
        resumed.save(tensors(4), 4)
        resumed.save(tensors(5), 5)
        assert files(work) == ["checkpoint", "model.ckpt-4.data-00000-of-00001",
                               "model.ckpt-4.index", "model.ckpt-5.data-00000-of-00001",
                               "model.ckpt-5.index"], where
    # Every rename and delete of a save was a kill point: data, index, state file, the two files
    # of the pruned checkpoint.
    assert len(points) == 5, points
    assert "index" in points[1] and "checkpoint" in points[2]


@pytest.mark.parametrize("damage", ["truncate_index", "truncate_data", "flip_data_byte",
                                    "delete_data", "empty_state_file", "garbage_state_file"])
def test_damaged_latest_checkpoint_falls_back_to_the_previous(tmp_path, damage, caplog):
    # TensorFlow's own warning is read below; a command run earlier in the same process may have
    # quieted TensorFlow's logger (util/console.py).
    caplog.set_level(logging.WARNING, logger="tensorflow")
    manager = checkpoint.CheckpointManager(str(tmp_path), max_to_keep=3)
    manager.save(tensors(1), 1)
    manager.save(tensors(2), 2)
    data, index = tmp_path / "model.ckpt-2.data-00000-of-00001", tmp_path / "model.ckpt-2.index"
    if damage == "truncate_index":
        index.write_bytes(index.read_bytes()[:20])
    elif damage == "truncate_data":
        data.write_bytes(data.read_bytes()[:30])
    elif damage == "flip_data_byte":
        raw = bytearray(data.read_bytes())
        raw[17] ^= 0x01  # one bit: caught by the per-tensor CRC
        data.write_bytes(bytes(raw))
    elif damage == "delete_data":
        data.unlink()
    elif damage == "empty_state_file":
        (tmp_path / "checkpoint").write_text("")
    else:
        (tmp_path / "checkpoint").write_text("model_checkpoint_path: {{{ garbage")
    expected = 1 if "state" not in damage else 2
    latest = manager.latest()
    assert latest.endswith(f"model.ckpt-{expected}")
    np.testing.assert_array_equal(checkpoint.read_all(latest)["electra/w"],
                                  tensors(expected)["electra/w"])
    if expected == 1:
        assert "model.ckpt-2 is unreadable" in caplog.text
    else:
        # TF's own reader skips a garbled file with a warning the quiet console hides, and
        # raises on an empty one: either way ours reports it, on its own logger.
        assert any(r.name == "util.checkpoint" and "state file" in r.getMessage()
                   and "unreadable" in r.getMessage() for r in caplog.records), caplog.text


def test_only_unreadable_checkpoints_refuse_a_restart_from_zero(tmp_path):
    manager = checkpoint.CheckpointManager(str(tmp_path))
    manager.save(tensors(1), 1)
    (tmp_path / "model.ckpt-1.data-00000-of-00001").write_bytes(b"xx")
    with pytest.raises(checkpoint.UnreadableCheckpointsError,
                       match=r"holds 1 checkpoint\(s\) but none reads back \(model\.ckpt-1: .*\)"
                             r"\. Refusing to start again from step 0"):
        manager.latest()
    # A save torn before its index landed is not a checkpoint: a fresh start is right there.
    os.remove(tmp_path / "model.ckpt-1.index")
    assert manager.latest() is None


class FullDisk:
    """A file whose every write fails with ENOSPC, as a full disk's: like write() (no file
    name), or naming `path` (the temporary an atomic write goes through)."""

    def __init__(self, f, path: str | None = None):
        self.f, self.path = f, path

    def write(self, data):
        raise OSError(errno.ENOSPC, "No space left on device", *[self.path][:bool(self.path)])

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.f.close()

    def __getattr__(self, name):
        return getattr(self.f, name)


def test_failed_atomic_write_keeps_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "results.json"
    io_utils.write_json(str(path), {"accuracy": 0.5})

    real_fdopen = os.fdopen
    monkeypatch.setattr(io_utils.os, "fdopen", lambda *a, **k: FullDisk(real_fdopen(*a, **k)))
    with pytest.raises(OSError, match="No space left"):
        tu.write_results(str(path), str(tmp_path / "results.txt"), {"accuracy": 0.9})
    monkeypatch.undo()
    assert json.loads(path.read_text()) == {"accuracy": 0.5}
    assert files(tmp_path) == ["results.json"]


# Every writer goes through a temporary; a full or read-only disk is reported of the output.
def _full_on_write(monkeypatch, tmp_name: str | None):
    """Atomic writes (io_utils: os.fdopen's files) fail with ENOSPC, as write() does (no file
    name) or naming the temporary (`tmp_name` "temp")."""
    real_fdopen = io_utils.os.fdopen

    def fdopen(fd, *args, **kwargs):
        path = os.readlink(f"/proc/self/fd/{fd}") if tmp_name else None
        return FullDisk(real_fdopen(fd, *args, **kwargs), path)

    monkeypatch.setattr(io_utils.os, "fdopen", fdopen)


@pytest.mark.parametrize("tmp_name", [None, "temp"])
@pytest.mark.parametrize("writer", ["json", "text", "jsonl", "copy"])
def test_a_full_disk_names_the_output_not_its_temporary(tmp_path, monkeypatch, writer, tmp_name):
    path = str(tmp_path / "out" / "results.json")
    (tmp_path / "src").write_text("x")
    _full_on_write(monkeypatch, tmp_name)
    write = {"json": lambda: io_utils.write_json(path, {"a": 1}),
             "text": lambda: io_utils.write_text(path, "a"),
             "jsonl": lambda: io_utils.write_jsonl(path, [{"a": 1}]),
             "copy": lambda: io_utils.copy_file(str(tmp_path / "src"), path)}[writer]
    with pytest.raises(OSError) as raised:
        write()
    assert str(raised.value) == (f"cannot write {path}: No space left on device (the disk is "
                                 "full: free space or write elsewhere)")
    assert raised.value.errno == errno.ENOSPC and raised.value.filename == path
    assert files(tmp_path / "out") == []  # the temporary is gone


def test_a_read_only_disk_names_each_writers_output(tmp_path, monkeypatch):
    """Checkpoints, tfrecord shards, locks and exports write temporaries of their own: a
    read-only disk (EROFS on the temporary) is said of the checkpoint, shard, lock or --output."""
    from pretrain.builder import tfrecord_writer
    import export_model

    def read_only(path, *args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system", str(path))

    monkeypatch.setattr(fs, "replace", read_only)
    with pytest.raises(checkpoint.CheckpointWriteError) as raised:
        checkpoint.save_tensors(str(tmp_path / "model.ckpt-4"), tensors(4))
    assert str(raised.value) == (
        f"cannot write checkpoint {tmp_path}/model.ckpt-4: Read-only file system (the file "
        "system is read-only: write elsewhere); existing checkpoints are left as they were")
    monkeypatch.undo()
    shard = str(tmp_path / "pretrain_data.tfrecord-0-of-2")
    monkeypatch.setattr(tfrecord_writer.fs, "open", read_only)
    with pytest.raises(OSError, match=rf"^cannot write shard {shard}: Read-only file system"):
        tfrecord_writer.TFRecordWriter(str(tmp_path / ".pretrain_data.tfrecord-0-of-2.tmp-1"),
                                       output=shard)
    monkeypatch.undo()
    monkeypatch.setattr(tu, "open", read_only, raising=False)  # the lock's temporary
    with pytest.raises(OSError, match=rf"^cannot write lock file {tmp_path}/\.run\.lock: "
                                      "Read-only file system"):
        tu.RunLock(str(tmp_path)).acquire()
    monkeypatch.undo()
    with pytest.raises(OSError, match=rf"^cannot write --output {tmp_path}/hf: Read-only file "
                                      r"system \(the file system is read-only"):
        with export_model.atomic_output_dir(str(tmp_path / "hf")) as tmp:
            read_only(os.path.join(tmp, "config.json"))
    assert files(tmp_path) == []


def test_a_full_disk_while_caching_features_names_the_cache_file(tmp_path, monkeypatch):
    """TensorFlow's TFRecordWriter says a full disk in an OpError naming the temporary."""
    write_fixtures(tmp_path, tasks={"sst"})
    (tmp_path / "vocab.txt").write_text("\n".join(
        ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "movie"]) + "\n")
    config = configure_finetuning.FinetuningConfig.from_hparams("m", str(tmp_path), {
        "task_names": ["sst"], "init_checkpoint": "", "vocab_size": 7, "max_seq_length": 8})
    tasks = task_builder.get_tasks(config)

    class FullWriter:
        def __init__(self, path):
            self.path = path

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            pass

        def write(self, record):
            raise tf.errors.ResourceExhaustedError(
                None, None, f"{self.path}; No space left on device")

    monkeypatch.setattr(preprocessing.tf.io, "TFRecordWriter", FullWriter)
    with pytest.raises(OSError) as raised:
        preprocessing.Preprocessor(config, tasks).prepare_train()
    cache = os.path.join(config.preprocessed_data_dir, os.path.basename(str(
        raised.value.filename)))
    assert str(raised.value) == (f"cannot write feature cache file {cache}: No space left on "
                                 "device (the disk is full: free space or write elsewhere)")
    assert ".tmp-" not in str(raised.value)


# -- whole runs: full disk, read-only, NaN ----------------------------------------------------


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny pre-trained model at step 2 (checkpoint every 2 steps)."""
    data = fx.write_data(str(tmp_path_factory.mktemp("faults") / "data"))
    hparams = fx.tiny_hparams(num_train_steps=2, save_checkpoints_steps=2, iterations_per_loop=2,
                              do_eval=False)
    assert run_pretraining.main(["--data-dir", data, "--model-name", "m",
                                 "--hparams", json.dumps(hparams)]) == 0
    return data, hparams


def _copy_run(trained, tmp_path, **changes):
    """A copy of the trained data + model whose saved config matches `changes` already."""
    data, hparams = trained
    target = str(tmp_path / "data")
    shutil.copytree(data, target)
    hparams = dict(hparams, **changes)
    config = PretrainingConfig.from_hparams("m", target, hparams)
    io_utils.write_json(os.path.join(config.model_dir, "pretrain_config.json"), config.to_dict())
    return target, hparams, config.model_dir


def _digests(directory) -> dict:
    return {name: open(os.path.join(directory, name), "rb").read()
            for name in files(directory) if name.startswith(("model.ckpt", "checkpoint"))}


def test_nan_loss_stops_the_run_with_the_step_and_keeps_the_last_good_checkpoint(
        trained, tmp_path, caplog):
    # A learning rate of 1e30 throws the weights to ~1e30 at step 3; step 4 overflows to NaN.
    data, hparams, model_dir = _copy_run(trained, tmp_path, num_train_steps=8, learning_rate=1e30)
    before = _digests(model_dir)
    code = run_pretraining.main(["--data-dir", data, "--model-name", "m",
                                 "--hparams", json.dumps(hparams)])
    assert code == 3
    assert "non-finite loss or gradient at step 4" in caplog.text
    assert f"Last good checkpoint: {model_dir}/model.ckpt-2 (left in place)" in caplog.text
    assert _digests(model_dir) == before  # nothing saved after the fault, nothing pruned


def test_full_disk_mid_run_is_a_clear_error_and_keeps_the_checkpoints(trained, tmp_path):
    # RLIMIT_FSIZE makes every write past 60 KB fail (EFBIG), in TF's C++ checkpoint writer too:
    # the path a full disk (ENOSPC) takes, without root to mount a small filesystem. Config and
    # event files stay small; the step-4 checkpoint (~300 KB) does not fit.
    data, hparams, model_dir = _copy_run(trained, tmp_path, num_train_steps=4)
    before = _digests(model_dir)
    script = ("import resource, sys\n"
              "resource.setrlimit(resource.RLIMIT_FSIZE, (60000, 60000))\n"
              "import run_pretraining\nsys.exit(run_pretraining.main(sys.argv[1:]))\n")
    out = preloaded.run([sys.executable, "-c", script, "--data-dir", data, "--model-name", "m",
                         "--hparams", json.dumps(hparams)], capture_output=True, text=True,
                        timeout=600, env=dict(os.environ, PYTHONPATH=REPO,
                                              TF_CPP_MIN_LOG_LEVEL="2"))
    assert out.returncode == 2, out.stderr[-3000:]
    assert "Traceback" not in out.stderr
    assert f"cannot write checkpoint {model_dir}/model.ckpt-4: " in out.stderr
    assert "File too large" in out.stderr and "existing checkpoints are left" in out.stderr
    assert ".tmp" not in out.stderr  # the checkpoint's temporary is never named
    assert _digests(model_dir) == before
    assert not [n for n in files(model_dir) if n.startswith(".tmp")]


def test_read_only_finetuning_output_is_a_clear_error(tmp_path, monkeypatch, caplog):
    write_fixtures(tmp_path, tasks={"sst"})
    (tmp_path / "vocab.txt").write_text("\n".join(
        ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "movie"]) + "\n")
    models = str(tmp_path / "models")
    real_open = os.open

    def read_only(path, flags, *args, **kwargs):
        if str(path).startswith(models) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT):
            raise OSError(errno.EROFS, "Read-only file system", path)
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", read_only)
    code = run_finetuning.main(["--data-dir", str(tmp_path), "--model-name", "m", "--hparams",
                                json.dumps({"task_names": ["sst"], "init_checkpoint": "",
                                            "vocab_size": 7, "max_seq_length": 8})])
    assert code == 2
    assert "Read-only file system" in caplog.text and models in caplog.text


# -- run locks --------------------------------------------------------------------------------


def _write_lock(directory, **owner) -> tu.RunLock:
    lock = tu.RunLock(str(directory))
    os.makedirs(directory, exist_ok=True)
    with open(lock.path, "w") as f:
        f.write(json.dumps(owner) if owner else "")
    return lock


def test_live_owner_is_refused_with_pid_host_and_lock_path(tmp_path):
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        time.sleep(0.2)
        lock = _write_lock(tmp_path, pid=live.pid, host=tu.RunLock(str(tmp_path)).host,
                           started=time.time())
        with pytest.raises(tu.RunLockError,
                           match=rf"in use by another run \(pid {live.pid} on host {lock.host}, "
                                 rf"lock file {lock.path}\)"):
            tu.RunLock(str(tmp_path)).acquire()
    finally:
        live.kill()
        live.wait()
    tu.RunLock(str(tmp_path)).acquire().release()  # its owner died: stale now


@pytest.mark.parametrize("kind", ["dead_pid", "own_pid", "reused_pid", "old_other_host",
                                  "old_empty"])
def test_stale_locks_are_recognised_and_taken_over(tmp_path, kind, caplog):
    host = tu.RunLock(str(tmp_path)).host
    if kind == "dead_pid":
        dead = subprocess.Popen([sys.executable, "-c", "pass"])
        dead.wait()
        lock = _write_lock(tmp_path, pid=dead.pid, host=host, started=time.time())
    elif kind == "own_pid":  # a restarted container's process often gets the dead one's pid
        lock = _write_lock(tmp_path, pid=os.getpid(), host=host, started=time.time())
    elif kind == "reused_pid":  # the pid is alive, but its process started after the lock
        reused = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        lock = _write_lock(tmp_path, pid=reused.pid, host=host, started=time.time() - 3600)
    elif kind == "old_other_host":
        lock = _write_lock(tmp_path, pid=123, host="elsewhere", started=0)
        os.utime(lock.path, (0, 0))
    else:  # an empty lock (a process killed while writing it, before locks were atomic)
        lock = _write_lock(tmp_path)
        os.utime(lock.path, (0, 0))
    try:
        taken = tu.RunLock(str(tmp_path)).acquire()
    finally:
        if kind == "reused_pid":
            reused.kill()
            reused.wait()
    assert json.loads(open(lock.path).read())["pid"] == os.getpid()
    assert "taking over stale lock" in caplog.text
    taken.release()
    assert not os.path.exists(lock.path)


def test_fresh_locks_of_other_hosts_and_half_written_locks_are_respected(tmp_path):
    _write_lock(tmp_path, pid=123, host="elsewhere", started=time.time())
    with pytest.raises(tu.RunLockError, match="pid 123 on host elsewhere"):
        tu.RunLock(str(tmp_path)).acquire()
    os.remove(tu.RunLock(str(tmp_path)).path)
    _write_lock(tmp_path)  # empty and young: its writer may still be about to fill it in
    with pytest.raises(tu.RunLockError, match="in use by another run"):
        tu.RunLock(str(tmp_path)).acquire()


def test_lock_file_is_never_seen_empty(tmp_path, monkeypatch):
    # The lock appears with its content in one step (a hard link of a written temporary).
    seen = []
    real_link = os.link

    def spy(src, dst, *args, **kwargs):
        seen.append(open(src).read())
        return real_link(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "link", spy)
    lock = tu.RunLock(str(tmp_path)).acquire()
    assert json.loads(seen[0])["pid"] == os.getpid()
    assert files(tmp_path) == [".run.lock"]  # the temporary is gone
    lock.release()


def test_second_finetuning_run_on_the_same_model_dir_is_refused(tmp_path, caplog):
    write_fixtures(tmp_path, tasks={"sst"})
    (tmp_path / "vocab.txt").write_text("\n".join(
        ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "movie"]) + "\n")
    runs = tmp_path / "models" / "m" / "finetuning_models"
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        lock = tu.RunLock(str(runs), filename=".sst_model.lock")
        os.makedirs(runs)
        with open(lock.path, "w") as f:
            json.dump({"pid": live.pid, "host": lock.host, "started": time.time()}, f)
        code = run_finetuning.main(["--data-dir", str(tmp_path), "--model-name", "m", "--hparams",
                                    json.dumps({"task_names": ["sst"], "init_checkpoint": "",
                                                "vocab_size": 7, "max_seq_length": 8})])
    finally:
        live.kill()
        live.wait()
    assert code == 2
    assert f"in use by another run (pid {live.pid}" in caplog.text and lock.path in caplog.text


def test_nan_in_finetuning_stops_with_the_step_and_keeps_the_last_checkpoint(tmp_path, caplog):
    # An lr of 1e30 throws the weights to ~1e30 at the first step with lr > 0; the next step's
    # loss is no longer finite. Each trial diverges so: the second still runs, and with every
    # trial diverged the exit status is 3.
    write_fixtures(tmp_path, tasks={"sst"})
    (tmp_path / "vocab.txt").write_text("\n".join(
        ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "movie", "is", "good", "bad"]) + "\n")
    hparams = {"task_names": ["sst"], "init_checkpoint": "", "vocab_size": 10, "max_seq_length": 8,
               "train_batch_size": 1, "num_train_epochs": 2.0, "learning_rate": 1e30,
               "save_checkpoints_steps": 1, "embedding_size": 16, "num_trials": 2,
               "model_hparam_overrides": {"hidden_size": 16, "num_hidden_layers": 1,
                                          "num_attention_heads": 1, "intermediate_size": 32}}
    code = run_finetuning.main(["--data-dir", str(tmp_path), "--model-name", "m",
                                "--hparams", json.dumps(hparams)])
    assert code == 3
    match = re.search(r"non-finite values at step (\d+) \(trial 1\): loss=nan", caplog.text)
    step = int(match.group(1))  # the warm-up starts at lr 0: the first steps are still finite
    trial = tmp_path / "models" / "m" / "finetuning_models" / "sst_model_1"
    latest = checkpoint.CheckpointManager(str(trial)).latest()
    assert latest.endswith(f"model.ckpt-{step - 1}")
    assert f"Last good checkpoint: {latest} (left in place)" in caplog.text
    assert "non-finite values at step" in caplog.text and "(trial 2)" in caplog.text
    # No figures from a NaN model: each trial recorded as diverged, the median of none.
    summary = json.loads((tmp_path / "models" / "m" / "results" / "sst_results.json").read_text())
    assert [t["results"] for t in summary["trials"]] == [{}, {}]
    assert summary["diverged_trials"] == 2 and summary["median"] == {}
    assert "every trial diverged (2 of 2)" in caplog.text


# -- stale results: caches and "already done" decisions follow every input ----------------------


TINY_FINETUNE = {"init_checkpoint": "", "max_seq_length": 8, "train_batch_size": 2,
                 "eval_batch_size": 2, "predict_batch_size": 2, "embedding_size": 16,
                 "model_hparam_overrides": {"hidden_size": 16, "num_hidden_layers": 1,
                                            "num_attention_heads": 1, "intermediate_size": 32}}
WORDS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(1, 9)]


def _custom_run(tmp_path, spec, **hparams):
    """run_finetuning.main on custom task "mine" (files in tmp_path), a 1-layer random model."""
    (tmp_path / "vocab.txt").write_text("\n".join(WORDS) + "\n")
    spec = {k: str(tmp_path / v) if k in ("train", "dev", "test") else v for k, v in spec.items()}
    values = dict(TINY_FINETUNE, task_names=["mine"], vocab_size=len(WORDS),
                  custom_tasks={"mine": spec}, **hparams)
    return lambda: run_finetuning.main(["--data-dir", str(tmp_path), "--model-name", "m",
                                        "--hparams", json.dumps(values)])


def _tree(root) -> dict:
    out = {}
    for directory, _, names in os.walk(root):
        for name in names:
            path = os.path.join(directory, name)
            out[path] = open(path, "rb").read()
    return out


def test_a_finished_trial_follows_its_dev_test_and_training_files(tmp_path, caplog):
    """A finished trial is reused only while its inputs are the same: an edited dev file or
    another metric re-evaluates it (no training), an edited test file rewrites its test
    predictions, and an edited training file is refused naming the file (exit 2, nothing on
    disk changed; the check a halted trial meets too). Its old score was reported, and a halted
    trial of a shrunk training file was recorded as finished, before."""
    caplog.set_level("INFO")
    (tmp_path / "train.csv").write_text("text,label\n" + "".join(
        f"w{i} w{i + 1},{'pos' if i % 2 else 'neg'}\n" for i in range(1, 7)))
    (tmp_path / "dev.csv").write_text("text,label\nw1 w2,pos\nw3 w4,neg\nw5,pos\nw6,neg\n")
    (tmp_path / "test.csv").write_text("text\nw1\nw2\n")
    spec = {"type": "classification", "train": "train.csv", "dev": "dev.csv",
            "test": "test.csv", "text_a": "text", "label": "label"}
    run = _custom_run(tmp_path, spec, write_test_outputs=True, num_train_epochs=1.0)
    models = tmp_path / "models" / "m"
    trial = models / "finetuning_models" / "mine_model_1"
    results = models / "results" / "mine_results.json"
    predictions = models / "test_predictions" / "trial_1" / "mine_test_predictions.jsonl"
    assert run() == 0
    weights = _digests(str(trial))
    first = json.loads(results.read_text())["median"]["mine"]["accuracy"]

    (tmp_path / "dev.csv").write_text("text,label\nw1 w2,neg\nw3 w4,neg\nw5,pos\nw6,neg\n")
    caplog.clear()
    assert run() == 0
    assert ("its evaluation data or settings changed (data.mine dev.data_sha256.mine.dev.csv: "
            "content changed): not reusing its results") in caplog.text
    assert "trial 1: already trained (3 steps)" in caplog.text  # evaluated, not trained again
    assert json.loads(results.read_text())["median"]["mine"]["accuracy"] != first
    assert _digests(str(trial)) == weights

    run = _custom_run(tmp_path, dict(spec, metrics=["accuracy", "f1"]), write_test_outputs=True,
                      num_train_epochs=1.0)
    caplog.clear()
    assert run() == 0  # a metric is not a training setting: evaluated, not refused
    assert "custom_specs.mine.metrics: added" in caplog.text
    assert "f1" in json.loads(results.read_text())["median"]["mine"]

    (tmp_path / "test.csv").write_text("text\nw1\nw2\nw3\n")
    caplog.clear()
    assert run() == 0
    assert "its test data changed (mine test.data_sha256.mine.test.csv: content changed)" \
        in caplog.text
    assert len(predictions.read_text().splitlines()) == 3

    (tmp_path / "train.csv").write_text("text,label\nw1 w2,pos\nw3 w4,neg\n")
    before = _tree(tmp_path)
    caplog.clear()
    assert run() == 2
    assert (f"{trial} holds a trial trained on other training data (data_sha256.mine.train.csv: "
            "content changed)") in caplog.text
    after = _tree(tmp_path)
    assert [p for p in before if after.get(p) != before[p]] == []


def test_feature_cache_keys_on_a_custom_tasks_columns_and_range(tmp_path):
    """Another text column of the same file, a second text column or another regression range
    is featurized anew (the cache used to key on the file and the label set only, so the old
    column's features and old targets were reused: same dev score, scores off by the range)."""
    (tmp_path / "vocab.txt").write_text("\n".join(WORDS) + "\n")
    (tmp_path / "train.tsv").write_text("a\tb\ty\nw1 w2\tw5\t1\nw3\tw6 w7\t4\n")

    def prepare(**changes):
        spec = dict({"type": "regression", "train": str(tmp_path / "train.tsv"),
                     "text_a": "a", "label": "y", "range": [0, 5]}, **changes)
        config = configure_finetuning.FinetuningConfig.from_hparams(
            "m", str(tmp_path), dict(TINY_FINETUNE, task_names=["mine"], vocab_size=len(WORDS),
                                     custom_tasks={"mine": spec}))
        tasks = task_builder.get_tasks(config)
        data = preprocessing.Preprocessor(config, tasks).prepare_train()
        rows = [tf.train.Example.FromString(r.numpy()).features.feature
                for r in tf.data.TFRecordDataset(data.path)]
        return data.path, sorted((list(r["input_ids"].int64_list.value),
                                  round(r["mine_targets"].float_list.value[0], 4)) for r in rows)

    path, rows = prepare()
    assert prepare() == (path, rows)  # same spec, same file: the cache
    other_column = prepare(text_a="b")
    assert other_column[0] != path and other_column[1] != rows
    other_range = prepare(range=[0, 10])
    assert other_range[0] != path
    assert [t for _, t in other_range[1]] == [t / 2 for _, t in rows]
    pair = prepare(text_b="b")
    assert pair[0] != path and pair[1] != rows


# -- a signal during a long phase that has nothing to save -------------------------------------


def _signal_during(monkeypatch, phase: str) -> list:
    """Sends this process a real SIGTERM at the first preemption.check of `phase` (a substring
    of what the check says it is doing), as a scheduler would in the middle of that phase."""
    from util import preemption
    real, sent = preemption.check, []

    def check(doing, *args, **kwargs):
        if phase in doing and not sent:
            sent.append(doing)
            os.kill(os.getpid(), signal.SIGTERM)
            deadline = time.time() + 10
            while not preemption.requested() and time.time() < deadline:
                time.sleep(0.01)
        return real(doing, *args, **kwargs)

    monkeypatch.setattr(preemption, "check", check)
    return sent


def _sst_probe_dir(root) -> str:
    sst = root / "sst_probe"
    sst.mkdir()
    rows = "".join(f"w{i} w{i + 1}\t{i % 2}\n" for i in range(1, 9))
    (sst / "train.tsv").write_text("sentence\tlabel\n" + rows)
    (sst / "dev.tsv").write_text("sentence\tlabel\n" + rows)
    return str(sst)


@pytest.mark.parametrize("phase", ["periodic_eval", "final_eval", "probes"])
def test_a_signal_during_a_pretraining_eval_stops_it_at_the_next_batch(
        trained, tmp_path, monkeypatch, caplog, phase):
    """SIGTERM during an eval (eval_every_steps, do_eval's, the probes) used to wait for the
    whole eval (100 batches by default), then exit 0. Now: exit 75 at the next batch, no
    results written; a periodic eval at an unsaved step saves that step first."""
    changes = {"periodic_eval": dict(num_train_steps=6, eval_every_steps=3, do_eval=True),
               "final_eval": dict(do_train=False, do_eval=True),
               "probes": dict(do_train=False, do_eval=True,
                              probe_tasks={"sst": _sst_probe_dir(tmp_path)})}[phase]
    data, hparams, model_dir = _copy_run(trained, tmp_path, **changes)
    before = _digests(model_dir)
    sent = _signal_during(monkeypatch, "probe" if phase == "probes" else "the eval at step")
    code = run_pretraining.main(["--data-dir", data, "--model-name", "m",
                                 "--hparams", json.dumps(hparams)])
    assert code == 75 and sent
    step = 3 if phase == "periodic_eval" else 2
    what = ("the probes' feature extraction" if phase == "probes"
            else f"the eval at step {step} (batch 1 of 2)")
    assert f"stopped on SIGTERM during {what}" in caplog.text
    assert "nothing of it was written" in caplog.text
    assert not os.path.exists(os.path.join(model_dir, "results"))
    after = _digests(model_dir)
    if phase == "periodic_eval":  # trained to step 3: saved there, the eval owed to the re-run
        assert "stopped on SIGTERM at step 3, checkpoint saved" in caplog.text
        assert {n for n in after if n.startswith("model.ckpt-3")}
    else:
        assert after == before


def _fake_trial(tmp_path, tasks, **hparams) -> tuple:
    """A trial directory holding a random model's checkpoint and settings (no training)."""
    from finetune import finetuning_model, trainer
    from tests.test_finetune_data import VOCAB, make_config
    config = make_config(tmp_path, tasks, **dict(TINY_FINETUNE, **hparams))
    model = finetuning_model.FinetuningModel(config, task_builder.get_tasks(config), seed=1)
    trial = tmp_path / "trial"
    checkpoint.CheckpointManager(str(trial)).save(
        {n: v.numpy() for n, v in checkpoint.by_name(model.variables).items()}, 3)
    io_utils.write_json(str(trial / "finetune_config.json"), {
        "bert_config": model.bert_config.to_dict(), "train_steps": 3,
        "training_settings": trainer.training_settings(config)})
    return config, str(trial), VOCAB


@pytest.mark.parametrize("phase", ["featurizing", "predictions on", "predict.py"])
def test_a_signal_during_featurization_evaluation_or_prediction_stops_at_the_next_batch(
        tmp_path, monkeypatch, caplog, phase):
    """Featurizing a task, a trial's eval and predict.py ran to their end on SIGTERM. Now each
    stops at the next example or batch with exit 75 and writes nothing: no feature cache or
    temporary, no results, no --output."""
    write_fixtures(tmp_path, tasks={"sst"})
    if phase == "predict.py":
        config, trial, _ = _fake_trial(tmp_path, ["sst"])
        (tmp_path / "new.txt").write_text("the movie\n" * 5)
        sent = _signal_during(monkeypatch, "predicting")
        before = _tree(tmp_path)
        code = predict.main(["--model-dir", trial, "--input", str(tmp_path / "new.txt"),
                             "--output", str(tmp_path / "out.jsonl"), "--vocab-file",
                             config.vocab_file, "--no-progress"])
        assert code == 75 and sent
        assert f"--output {tmp_path / 'out.jsonl'} was not written" in caplog.text
        assert _tree(tmp_path) == before
        return
    from tests.test_finetune_data import VOCAB
    (tmp_path / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    hparams = dict(TINY_FINETUNE, task_names=["sst"], vocab_size=len(VOCAB),
                   do_train=phase == "featurizing")
    sent = _signal_during(monkeypatch, phase)
    code = run_finetuning.main(["--data-dir", str(tmp_path), "--model-name", "m",
                                "--hparams", json.dumps(hparams)])
    assert code == 75 and sent
    assert f"stopped on SIGTERM during {sent[0]}" in caplog.text
    models = tmp_path / "models" / "m"
    assert not (models / "results").exists()
    cache = models / "finetuning_tfrecords" / "sst_tfrecords"
    if phase == "featurizing":  # the split being written: neither its records nor a temporary
        assert not cache.exists() or os.listdir(cache) == []


# -- predict.py: output record i is input example i --------------------------------------------


def test_predict_keeps_record_i_for_example_i(tmp_path, monkeypatch, caplog):
    """An empty line between examples, or an empty text, used to be dropped (records shifted
    against the input) or predicted as an empty text: refused with file:line, exit 2, nothing
    written. Tables and every other documented format read from standard input (tsv, csv and
    squad were refused there). A halted trial predicts with a warning."""
    import io
    write_fixtures(tmp_path, tasks={"sst"})
    config, trial, _ = _fake_trial(tmp_path, ["sst"])
    out = tmp_path / "out.jsonl"

    def run(*args, stdin=None):
        if stdin is not None:
            monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin.encode())))
        caplog.clear()
        return predict.main(["--model-dir", trial, "--vocab-file", config.vocab_file,
                             "--no-progress", "--output", str(out), *args])

    (tmp_path / "gap.txt").write_text("the movie\n\nthe cat\n")
    (tmp_path / "empty.jsonl").write_text('{"text_a": "the movie"}\n{"text_a": " "}\n')
    before = _tree(tmp_path)
    assert run("--input", str(tmp_path / "gap.txt")) == 2
    assert f"{tmp_path / 'gap.txt'}:2: empty line; every line is an example" in caplog.text
    assert run("--input", str(tmp_path / "empty.jsonl")) == 2
    assert f"{tmp_path / 'empty.jsonl'}:2: empty text (text_a); every row is an example" \
        in caplog.text
    assert run("--format", "tsv", stdin="text_a\nthe movie\n\nthe cat\n") == 2
    assert "<stdin>:3: empty line" in caplog.text
    assert _tree(tmp_path) == before
    # Trailing empty lines precede no example; standard input reads as a table.
    (tmp_path / "ok.txt").write_text("the movie\nthe cat\n\n\n")
    assert run("--input", str(tmp_path / "ok.txt")) == 0
    assert len(out.read_text().splitlines()) == 2
    assert run("--format", "tsv", stdin="text_a\nthe movie\nthe cat\nthe dog\n") == 0
    assert len(out.read_text().splitlines()) == 3
    assert "is a halted trial" not in caplog.text
    # A halted trial: its checkpoint's step is below the step count it was to train.
    saved = json.loads(open(os.path.join(trial, "finetune_config.json")).read())
    io_utils.write_json(os.path.join(trial, "finetune_config.json"), dict(saved, train_steps=9))
    assert run("--input", str(tmp_path / "ok.txt")) == 0
    assert "is a halted trial: its checkpoint is at step 3 of 9" in caplog.text
    # A trial that diverged: a re-run would not finish it (its record is final), so the warning
    # says what it is instead of advising that re-run.
    io_utils.write_json(os.path.join(trial, "eval_results.json"), {
        "trial": 1, "global_step": 3, "train_steps": 9, "results": {},
        "diverged": "non-finite values at step 4 (trial 1): loss=nan"})
    assert run("--input", str(tmp_path / "ok.txt")) == 0
    assert "is a trial that diverged (non-finite values at step 4 (trial 1): loss=nan): these " \
           "are the predictions of its last good checkpoint (step 3)" in caplog.text
    assert "re-run its run_finetuning.py command to finish it" not in caplog.text
    # Empty input, however given, is said to be empty (the null device was "does not exist").
    for empty in (os.devnull, str(tmp_path / "none.txt")):
        open(empty, "w").close()
        assert run("--input", empty) == 2
        assert f"--input {empty} is empty: there is nothing to predict" in caplog.text
    assert run(stdin="") == 2 and "standard input is empty" in caplog.text


def test_a_qa_answer_never_shows_the_scorers_placeholder(tmp_path, monkeypatch):
    """A question without any valid span was answered "empty" (the official scorer's
    placeholder, kept for its files): predict.py's record says so instead."""
    from finetune.qa import qa_metrics
    (tmp_path / "vocab.txt").write_text("\n".join(WORDS) + "\n")
    config = configure_finetuning.FinetuningConfig.from_hparams(
        "m", str(tmp_path), dict(TINY_FINETUNE, task_names=["squad"], vocab_size=len(WORDS)))
    task = task_builder.get_tasks(config)[0]
    placeholder = {"text": qa_metrics.EMPTY_PREDICTION, "start_logit": 0.0, "end_logit": 0.0,
                   "probability": 1.0}
    example = types.SimpleNamespace(qas_id="q1")
    monkeypatch.setattr(task, "predict_questions", lambda examples, outputs: {
        "q1": qa_metrics.QuestionPrediction("empty", [placeholder], None, found=False)})
    assert task.prediction_records([example], []) == [
        {"id": "q1", "answer": "", "probability": 0.0, "no_span": True}]


# -- exports carry what is needed to read their outputs ----------------------------------------


def test_exports_carry_label_names_and_a_regressions_range(tmp_path, caplog):
    """A regression head's output is (score - lo) / scale: the SavedModel used to give only that
    (STS-B scores off by 5x) and the Hugging Face config nothing to undo it; a classifier's
    SavedModel gave label ids without their names."""
    import export_model
    caplog.set_level("INFO")
    write_fixtures(tmp_path, tasks={"sts", "sst"})
    config, trial, _ = _fake_trial(tmp_path, ["sts", "sst"])
    served = tmp_path / "served"
    assert export_model.main(["--model-dir", trial, "--format", "saved_model", "--output",
                              str(served), "--vocab-file", config.vocab_file]) == 0
    loaded = tf.saved_model.load(str(served))
    assert loaded.label_names["sst"].numpy().tolist() == [b"0", b"1"]
    assert loaded.score_range["sts"].numpy().tolist() == [0.0, 5.0, 5.0]
    ids = tf.constant([[2, 5, 6, 3, 0, 0, 0, 0]], tf.int32)
    out = loaded.signatures["serving_default"](
        input_ids=ids, input_mask=tf.cast(ids > 0, tf.int32), segment_ids=tf.zeros_like(ids))
    np.testing.assert_allclose(out["sts_score"].numpy(), out["sts_predictions"].numpy() * 5,
                               rtol=1e-6)
    assert out["sst_label"].numpy()[0] == [b"0", b"1"][int(out["sst_predictions"].numpy()[0])]
    hf_dir = tmp_path / "hf"
    assert export_model.main(["--model-dir", trial, "--format", "huggingface", "--model",
                              "classifier", "--task", "sts", "--output", str(hf_dir),
                              "--vocab-file", config.vocab_file]) == 0
    hf_config = json.loads((hf_dir / "config.json").read_text())
    assert hf_config["electra_score_range"] == {
        "min_value": 0.0, "max_value": 5.0, "scale": 5.0,
        "score": "logits[..., 0] * scale + min_value"}
    assert "electra_score_range\" holds min_value, max_value and scale" in caplog.text
