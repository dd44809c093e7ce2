"""util/training_utils: run lock, finite checks, results files, progress, summaries."""
import json
import math
import os
import subprocess
import sys

import pytest
import tensorflow as tf

from util import training_utils as tu


def test_secs_to_str():
    assert tu.secs_to_str(5.2) == "5s"
    assert tu.secs_to_str(63) == "1m 03s"
    assert tu.secs_to_str(3723) == "1h 02m 03s"


def test_lock_refuses_second_owner_and_releases(tmp_path):
    with tu.RunLock(str(tmp_path)) as lock:
        owner = json.loads(open(lock.path).read())
        assert owner["pid"] == os.getpid() and owner["host"]
        # Another live process on this host holds it: simulate with our parent's pid.
        with open(lock.path, "w") as f:
            json.dump({"pid": os.getppid(), "host": lock.host}, f)
        with pytest.raises(tu.RunLockError, match=f"pid {os.getppid()}"):
            tu.RunLock(str(tmp_path)).acquire()
        with open(lock.path, "w") as f:
            json.dump({"pid": os.getpid(), "host": lock.host}, f)
    assert not os.path.exists(lock.path)


def test_a_file_url_and_the_local_path_share_one_exclusive_lock(tmp_path):
    # A file:// URL is the local disk: the same lock file, with exclusive create (not a lease).
    for first, second in [(str(tmp_path), f"file://{tmp_path}//"),
                          (f"file://{tmp_path}", str(tmp_path))]:
        with tu.RunLock(first) as lock:
            assert lock.path == os.path.join(str(tmp_path), ".run.lock")
            with open(lock.path, "w") as f:  # held by another live process (our parent)
                json.dump({"pid": os.getppid(), "host": lock.host}, f)
            with pytest.raises(tu.RunLockError,
                               match=f"in use by another run \\(pid {os.getppid()}"):
                tu.RunLock(second).acquire()
            with open(lock.path, "w") as f:
                json.dump({"pid": os.getpid(), "host": lock.host}, f)
        assert not os.path.exists(lock.path)


def test_stale_lock_of_dead_process_is_taken_over(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    lock = tu.RunLock(str(tmp_path))
    with open(lock.path, "w") as f:
        json.dump({"pid": dead.pid, "host": lock.host}, f)
    lock.acquire()
    assert json.loads(open(lock.path).read())["pid"] == os.getpid()
    lock.release()


def test_lock_of_other_host_is_stale_only_when_old(tmp_path):
    lock = tu.RunLock(str(tmp_path), stale_after_secs=100)
    with open(lock.path, "w") as f:
        json.dump({"pid": 1, "host": "elsewhere"}, f)
    with pytest.raises(tu.RunLockError, match="elsewhere"):
        lock.acquire()
    os.utime(lock.path, (0, 0))  # last refreshed in 1970
    lock.acquire()
    lock.release()


def test_check_finite_names_step_and_values():
    tu.check_finite({"loss": 1.0, "norm": 2.0}, step=3)
    with pytest.raises(tu.NonFiniteError, match=r"step 7.*loss=nan") as info:
        tu.check_finite({"loss": math.nan, "norm": 1.0}, step=7)
    assert info.value.step == 7 and info.value.names == ["loss"]
    assert bool(tu.all_finite([tf.constant([1.0, 2.0]), tf.constant(3.0)]))
    assert not bool(tu.all_finite([tf.constant([1.0, math.inf])]))


def test_write_results_json_and_text(tmp_path):
    tu.write_results(str(tmp_path / "r" / "a.json"), str(tmp_path / "r" / "a.txt"),
                     {"acc": 0.5, "step": 3}, header="eval at step 3")
    assert json.loads((tmp_path / "r" / "a.json").read_text()) == {"acc": 0.5, "step": 3}
    text = (tmp_path / "r" / "a.txt").read_text().splitlines()
    assert text == ["eval at step 3", "acc = 0.5000", "step = 3"]
    assert [p.name for p in (tmp_path / "r").iterdir() if p.name.startswith(".")] == []


def test_progress_logs_lines_without_a_terminal(caplog):
    caplog.set_level("INFO")
    progress = tu.Progress(total=10, initial=2, use_bar=False)
    progress.update(4, examples=8, loss=1.25)
    progress.update(6, examples=8, loss=1.0)
    progress.close()
    first, second = [r.getMessage() for r in caplog.records if "train step" in r.getMessage()]
    assert first.startswith("train step 4/10") and "loss 1.2500" in first
    # No ETA from the first block (a run's first holds its tracing): the pace is timed from it.
    assert "ETA" not in first and "ETA" in second


def test_summary_writer_writes_scalars(tmp_path):
    writer = tu.SummaryWriter(str(tmp_path))
    writer.scalars(5, {"loss": 2.0}, prefix="train/")
    writer.close()
    assert tu.read_scalars(str(tmp_path)) == {"train/loss": [(5, 2.0)]}
    tu.SummaryWriter(str(tmp_path / "none"), enabled=False).scalars(1, {"x": 1})
    assert not (tmp_path / "none").exists()


def test_resume_rule_splits_refused_and_allowed_changes():
    from util import resume
    saved = {"hidden_size": 32, "learning_rate": 1e-3, "model_dir": "/a", "old_key": 1}
    current = {"hidden_size": 64, "learning_rate": 5e-4, "model_dir": "/b", "new_key": 2}
    refused, allowed = resume.split_changes(saved, current, lambda k: k == "hidden_size",
                                            ignore=frozenset({"model_dir"}))
    assert refused == ["hidden_size: 32 -> 64"]
    assert allowed == ["learning_rate: 0.001 -> 0.0005"]  # keys only one side knows: no change
