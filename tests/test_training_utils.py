"""util/training_utils: run lock, finite checks, results files, progress, summaries."""
import json
import math
import os
import subprocess
import sys

import pytest
import tensorflow as tf

import preloaded
from conftest import REPO_ROOT
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


def test_functions_here_are_instantiated_without_constant_folding():
    """conftest's session fixture ran run_as_the_commands_run before this worker's first op:
    the eager context started without constant folding at function instantiation (OptimizerOptions
    L0, common subexpression elimination kept) and with Grappler off. Once the context runs, a
    call changes nothing and says so."""
    from tensorflow.core.protobuf import config_pb2
    from tensorflow.python.eager import context
    tf.constant(0.0)
    config = context.context().config
    options = config.graph_options.optimizer_options
    assert options.opt_level == config_pb2.OptimizerOptions.L0
    assert options.do_common_subexpression_elimination and not options.do_constant_folding
    assert config.graph_options.rewrite_options.disable_meta_optimizer
    assert tu._instantiate_without_constant_folding() is False


# The command's strategy is built (which starts TensorFlow's context) only after the process
# settings, so that the option the context reads at its start is there.
_SETTINGS_BEFORE_STRATEGY = """
import pathlib, sys
from tensorflow.core.protobuf import config_pb2
from tensorflow.python.eager import context
import run_finetuning, run_pretraining
from configure_pretraining import PretrainingConfig
from tests.test_finetune_data import make_config
from util import distribution

def make_strategy(*args, **kwargs):
    started = context.context()._context_handle is not None
    options = context.context().config.graph_options.optimizer_options
    print("at the strategy: context started", started, "folding",
          options.opt_level != config_pb2.OptimizerOptions.L0 or options.do_constant_folding)
    sys.exit(0)

distribution.make_strategy = make_strategy
work = pathlib.Path(sys.argv[2])
if sys.argv[1] == "pretraining":
    run_pretraining.train_or_eval(PretrainingConfig.from_hparams("m", str(work), {}))
else:
    run_finetuning.run_finetuning(make_config(work, ["sst"]))
"""


@pytest.mark.parametrize("command", ["pretraining", "finetuning"])
def test_the_commands_apply_their_settings_before_building_the_strategy(command, tmp_path):
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), TF_CPP_MIN_LOG_LEVEL="2")
    done = preloaded.run([sys.executable, "-c", _SETTINGS_BEFORE_STRATEGY, command, str(tmp_path)],
                         capture_output=True, text=True, env=env, timeout=120, cwd=str(tmp_path))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "at the strategy: context started False folding False" in done.stdout, done.stdout[-2000:]
