"""Preemption (util/preemption.py): real SIGTERM/SIGINT to training subprocesses.

A signalled run stops at the next step boundary (inside a long in-graph loop too), writes a
checkpoint at that step, exits 75, and the same command resumes it to the weights of a run that
was never interrupted, bit for bit; so does a run SIGKILLed inside its loop of steps. Also: the
time-based checkpoint interval, and a two-worker MultiWorkerMirroredStrategy run with one worker
signalled (and one killed). A signal inside a checkpoint write: tests/test_reliability_kill.py.
"""
import json
import logging
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import preloaded
import pretrain_fixtures as fx
from util import checkpoint, preemption, workers

from tests.test_finetune_data import VOCAB, write_fixtures
from tests.test_run_pretraining_distributed import _free_ports

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KILL_RESUME = os.path.join(REPO, "tools", "kill_resume.py")
STOPPED = re.compile(r"stopped on (SIG\w+|a signal to another worker) at step (\d+)")


def _env():
    return dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL="2")


def _script(name, data_dir, model, hparams):
    return [os.path.join(REPO, name), "--data-dir", str(data_dir), "--model-name", model,
            "--hparams", json.dumps(hparams)]


class Run:
    """A subprocess whose stderr is collected by a thread, so the test can wait for a line."""

    def __init__(self, argv, env=None):
        self.proc = preloaded.Popen([sys.executable] + argv, env=env or _env(),
                                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        for line in self.proc.stderr:
            self.lines.append(line)

    @property
    def stderr(self) -> str:
        return "".join(self.lines)

    def wait_for(self, text: str, timeout: float = 300.0) -> None:
        end = time.time() + timeout
        while text not in self.stderr:
            assert self.proc.poll() is None, f"exited {self.proc.returncode} before {text!r}:\n" \
                                             f"{self.stderr[-3000:]}"
            assert time.time() < end, f"no {text!r} after {timeout}s:\n{self.stderr[-3000:]}"
            time.sleep(0.05)

    def finish(self, timeout: float = 600.0) -> int:
        code = self.proc.wait(timeout=timeout)
        self._reader.join(timeout=10)
        return code


def _newest_step(directory) -> int:
    path = checkpoint.latest_valid(str(directory))
    return -1 if path is None else int(path.rsplit("-", 1)[1])


def _assert_bit_identical(expected_dir, got_dir):
    expected, got = checkpoint.read_all(str(expected_dir)), checkpoint.read_all(str(got_dir))
    assert sorted(got) == sorted(expected)
    for name, value in expected.items():
        np.testing.assert_array_equal(got[name], value, err_msg=name)
    return got


def _stopped_step(run: Run, signame: str) -> int:
    match = STOPPED.search(run.stderr)
    assert match is not None, run.stderr[-3000:]
    assert match.group(1) == signame
    return int(match.group(2))


def _no_temporaries(directory):
    leftovers = [n for root, _, names in os.walk(directory) for n in names if ".tmp" in n]
    assert not leftovers


# -- the guard, in process --------------------------------------------------------------------


def test_a_signal_becomes_a_stop_request_and_handlers_are_restored(caplog):
    before = {s: signal.getsignal(s) for s in preemption.SIGNALS}
    with caplog.at_level(logging.WARNING), preemption.install() as guard:
        flag = guard.flag()
        assert not preemption.requested() and not bool(flag.numpy())
        os.kill(os.getpid(), signal.SIGINT)  # would raise KeyboardInterrupt without the guard
        end = time.time() + 5
        while not bool(flag.numpy()) and time.time() < end:
            time.sleep(0.01)
        assert preemption.requested() and bool(flag.numpy())
        assert guard.signal_name == "SIGINT" and preemption.describe() == "SIGINT"
        os.kill(os.getpid(), signal.SIGTERM)  # a second signal: logged, still not fatal
        end = time.time() + 5
        while "received again" not in caplog.text and time.time() < end:
            time.sleep(0.01)
    assert "SIGINT received: stopping at the next step boundary" in caplog.text
    assert "SIGTERM received again" in caplog.text
    assert preemption.active() is None and not preemption.requested()
    assert {s: signal.getsignal(s) for s in preemption.SIGNALS} == before


def test_a_signal_while_a_function_is_traced_neither_deadlocks_nor_enters_the_graph():
    """The handler runs in the main thread between bytecodes, also in the middle of tracing a
    tf.function; it used to assign the flag there, inside the graph being built, and deadlock
    on the graph's lock (a run signalled while tracing its training loop hung for good)."""
    script = textwrap.dedent("""
        import signal, sys, time
        import tensorflow as tf
        from util import preemption
        with preemption.install() as guard:
            flag = guard.flag()

            @tf.function
            def step(x):
                y = x * 2.0
                guard._handler(signal.SIGTERM, None)  # the signal lands mid-trace
                return y + 1.0

            assert float(step(tf.constant(1.0))) == 3.0
            graph = step.get_concrete_function(tf.constant(1.0)).graph
            assert not [op for op in graph.get_operations() if "Assign" in op.type]
            end = time.time() + 10
            while not bool(flag.numpy()) and time.time() < end:
                time.sleep(0.01)
            assert guard.requested and bool(flag.numpy())
        print("ok")
    """)
    done = preloaded.run([sys.executable, "-c", script], env=_env(), capture_output=True,
                         text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]


def test_deadline():
    assert preemption.deadline(100.0, 0) == float("inf")
    assert preemption.deadline(100.0, 30) == 130.0


# -- pre-training ------------------------------------------------------------------------------

# Tiny steps (13-30 ms each on this machine): a signal sent when a run's first block (one step)
# has reported lands inside its next block, a loop of hundreds of steps.
LONG = 300


def test_pretraining_sigterm_sigint_and_sigkill_mid_loop_then_resume_bit_for_bit(tmp_path):
    """SIGTERM, then SIGINT to the re-run, each inside a loop of hundreds of steps: each run
    saves at the step it stopped at and exits 75. Then SIGKILL inside the next re-run's loop (as
    the out-of-memory killer or a lost machine would): nothing is saved and its lock is left
    behind. The same command again takes over the stale lock, continues from the
    newest checkpoint, and ends with the weights, optimizer slots and data position of a run
    never interrupted, bit for bit."""
    data = fx.write_data(str(tmp_path / "data"))
    # After the first step, one in-graph loop for the rest and no step-based checkpoint before
    # the end: only the stop request can end the loop early and only the preemption save writes.
    hparams = fx.tiny_hparams(num_train_steps=LONG, iterations_per_loop=LONG,
                              save_checkpoints_steps=0, do_eval=False)
    reference = Run(_script("run_pretraining.py", data, "reference", hparams))
    command = _script("run_pretraining.py", data, "victim", hparams)
    model_dir = os.path.join(data, "models", "victim")

    first = Run(command)
    first.wait_for(f"train step 1/{LONG}")
    first.proc.send_signal(signal.SIGTERM)
    assert first.finish() == preemption.EXIT_PREEMPTED, first.stderr[-3000:]
    step = _stopped_step(first, "SIGTERM")
    assert 0 < step < LONG
    assert _newest_step(model_dir) == step
    _no_temporaries(model_dir)

    second = Run(command)
    second.wait_for(f"train step {step + 1}/{LONG}")
    second.proc.send_signal(signal.SIGINT)
    assert second.finish() == preemption.EXIT_PREEMPTED, second.stderr[-3000:]
    assert "Traceback" not in second.stderr and "KeyboardInterrupt" not in second.stderr
    step2 = _stopped_step(second, "SIGINT")
    assert step < step2 < LONG and _newest_step(model_dir) == step2

    killed = Run(command)
    killed.wait_for(f"train step {step2 + 1}/{LONG}")
    killed.proc.send_signal(signal.SIGKILL)
    assert killed.finish() == -signal.SIGKILL
    assert f"at step {step2}" in killed.stderr and "stopped on" not in killed.stderr
    assert _newest_step(model_dir) == step2  # killed inside its loop: nothing saved
    assert os.path.exists(os.path.join(model_dir, ".run.lock"))  # left behind by the dead run

    last = Run(command)
    assert last.finish() == 0, last.stderr[-3000:]
    assert "resumed from" in last.stderr and f"at step {step2}" in last.stderr
    assert "stale lock" in last.stderr
    assert reference.finish() == 0, reference.stderr[-3000:]
    got = _assert_bit_identical(os.path.join(data, "models", "reference"), model_dir)
    assert int(got["global_step"]) == LONG


def test_time_based_checkpoints_at_step_boundaries(tmp_path):
    import run_pretraining
    from configure_pretraining import PretrainingConfig

    data = fx.write_data(str(tmp_path / "data"))
    # A deadline that has always passed: every step ends its loop (of up to 50) and saves.
    hparams = fx.tiny_hparams(num_train_steps=5, iterations_per_loop=50, save_checkpoints_steps=0,
                              save_checkpoints_secs=1e-6, keep_checkpoint_max=0, do_eval=False)
    run_pretraining.train_or_eval(PretrainingConfig.from_hparams("timed", data, hparams))
    model_dir = os.path.join(data, "models", "timed")
    steps = sorted(int(n.split("-")[1].split(".")[0]) for n in os.listdir(model_dir)
                   if n.startswith("model.ckpt-") and n.endswith(".index"))
    assert steps == [1, 2, 3, 4, 5]  # by steps alone (save_checkpoints_steps 0): step 5 only


# -- fine-tuning ---------------------------------------------------------------------------------


def _finetune_hparams(**overrides):
    hparams = dict(task_names=["sst"], vocab_size=len(VOCAB), max_seq_length=16,
                   init_checkpoint="", train_batch_size=2, eval_batch_size=4,
                   predict_batch_size=4, num_train_epochs=40.0, learning_rate=1e-3,
                   adam_bias_correction=True, embedding_size=16, num_trials=1,
                   model_hparam_overrides={"hidden_size": 32, "num_hidden_layers": 2,
                                           "num_attention_heads": 2, "intermediate_size": 64,
                                           "max_position_embeddings": 64})
    hparams.update(overrides)
    return hparams


def test_finetuning_trial_sigterm_saves_and_resumes_bit_for_bit(tmp_path):
    hparams = _finetune_hparams()
    for name in ("reference", "victim"):
        write_fixtures(tmp_path / name, tasks={"sst"})
        (tmp_path / name / "vocab.txt").write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
    reference = Run(_script("run_finetuning.py", tmp_path / "reference", "m", hparams))
    command = _script("run_finetuning.py", tmp_path / "victim", "m", hparams)
    trial_dir = tmp_path / "victim" / "models" / "m" / "finetuning_models" / "sst_model_1"

    victim = Run(command)
    victim.wait_for("trial 1: training")
    time.sleep(2.0)
    victim.proc.send_signal(signal.SIGTERM)
    assert victim.finish() == preemption.EXIT_PREEMPTED, victim.stderr[-3000:]
    assert "trial 1 stopped on SIGTERM" in victim.stderr
    step = _stopped_step(victim, "SIGTERM")
    assert _newest_step(trial_dir) == step
    assert not (tmp_path / "victim" / "models" / "m" / "results").exists()  # no eval yet

    resumed = Run(command)
    assert resumed.finish() == 0, resumed.stderr[-3000:]
    assert f"(step {step})" in resumed.stderr
    assert reference.finish() == 0, reference.stderr[-3000:]
    ref_trial = tmp_path / "reference" / "models" / "m" / "finetuning_models" / "sst_model_1"
    _assert_bit_identical(ref_trial, trial_dir)
    results = "models/m/results/sst_results.json"
    expected = json.loads((tmp_path / "reference" / results).read_text())
    assert json.loads((tmp_path / "victim" / results).read_text())["trials"] == expected["trials"]


def test_finetuning_signal_after_a_trial_stops_before_the_next(tmp_path):
    write_fixtures(tmp_path, tasks={"sst"})
    (tmp_path / "vocab.txt").write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
    command = _script("run_finetuning.py", tmp_path, "m",
                      _finetune_hparams(num_train_epochs=1.0, num_trials=2))
    # SIGTERM while trial 1's results are written: they are written, trial 2 is not started.
    hooked = preloaded.run(
        [sys.executable, KILL_RESUME, "--child", "--watch", str(tmp_path / "models"), "--pattern",
         "eval_results.json", "--op", "replace", "--ordinal", "1", "--signal", "TERM", "--"]
        + command, env=_env(), capture_output=True, text=True, timeout=600)
    assert hooked.returncode == preemption.EXIT_PREEMPTED, hooked.stderr[-3000:]
    assert "stopped on a signal before trial 2" in hooked.stderr
    models = tmp_path / "models" / "m" / "finetuning_models"
    assert (models / "sst_model_1" / "eval_results.json").exists()
    assert not (models / "sst_model_2").exists()

    resumed = preloaded.run([sys.executable] + command, env=_env(), capture_output=True,
                            text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "trial 1 already finished" in resumed.stderr
    summary = json.loads((tmp_path / "models" / "m" / "results" / "sst_results.json").read_text())
    assert [t["trial"] for t in summary["trials"]] == [1, 2]


# -- two workers -----------------------------------------------------------------------------------


def _two_workers(data, name, hparams, chief_prefix=()):
    """A MultiWorkerMirroredStrategy run of two processes: (chief, other). `chief_prefix`: argv
    that runs the chief's script under a hook (tools/kill_resume.py --child ... --)."""
    ports = _free_ports(2)
    cluster = {"worker": [f"127.0.0.1:{p}" for p in ports]}
    runs = []
    for index in range(2):
        env = _env()
        env["TF_CONFIG"] = json.dumps({"cluster": cluster,
                                       "task": {"type": "worker", "index": index}})
        prefix = list(chief_prefix) if index == 0 else []
        runs.append(Run(prefix + _script("run_pretraining.py", data, name, hparams), env=env))
    return runs


def _held_chief(model_dir, tmp_path, name):
    """argv that holds a chief inside its first checkpoint write (before the index is renamed
    into place) until the test writes the file `go`; `paused` appears when it is held."""
    paused, go = tmp_path / f"{name}.paused", tmp_path / f"{name}.go"
    return paused, go, [KILL_RESUME, "--child", "--watch", model_dir, "--pattern",
                        "model.ckpt-*.index", "--op", "replace", "--ordinal", "1",
                        "--event-log", str(paused), "--pause-until", str(go), "--"]


def _wait_until_held(paused, runs):
    end = time.time() + 600
    while not paused.exists():
        assert all(run.proc.poll() is None for run in runs), \
            "".join(run.stderr[-3000:] for run in runs)
        assert time.time() < end
        time.sleep(0.05)


def test_multi_worker_one_worker_signalled_all_stop_at_the_same_step(tmp_path):
    """Two workers, the chief held inside a checkpoint write at each moment that matters (a
    pause, not a race: the same on any load).
    1. The non-chief is signalled between two blocks of steps. The workers agree on every stop
       decision (one all-reduce of the votes, between blocks too) and leave together: all exit
       75 at the same step, the non-chief only once the chief's checkpoint is on disk. (A
       worker signalled outside the loop of steps used to stop alone, and the chief waited in
       its next collective until it failed: exit 1, "stopped sending heartbeats", unsaved.)
    2. The resumed non-chief is killed (SIGKILL, as the out-of-memory killer would): the chief
       stops in its next collective with exit 4, naming the dead worker (was a traceback and
       exit 1), its checkpoint kept.
    3. The re-run ends bit-identical to a two-worker run never interrupted."""
    data = fx.write_data(str(tmp_path / "data"))
    steps = 12
    hparams = fx.tiny_hparams(num_train_steps=steps, iterations_per_loop=4,
                              save_checkpoints_steps=4, do_eval=False, strategy="multi_worker")
    references = _two_workers(data, "reference", hparams)
    model_dir = os.path.join(data, "models", "victim")

    paused, go, hook = _held_chief(model_dir, tmp_path, "signalled")  # at its step-4 save
    chief, other = _two_workers(data, "victim", hparams, chief_prefix=hook)
    _wait_until_held(paused, [chief, other])
    other.proc.send_signal(signal.SIGTERM)  # the non-chief: the chief must save anyway
    other.wait_for("SIGTERM received")
    go.write_text("")
    assert other.finish() == preemption.EXIT_PREEMPTED, other.stderr[-3000:]
    step = _stopped_step(other, "SIGTERM")
    assert step in (4, 5)  # the vote between the blocks, or the next step's in the loop
    assert _newest_step(model_dir) == step  # saved before the non-chief left
    assert chief.finish() == preemption.EXIT_PREEMPTED, chief.stderr[-3000:]
    assert _stopped_step(chief, "a signal to another worker") == step
    assert "Traceback" not in chief.stderr + other.stderr

    paused, go, hook = _held_chief(model_dir, tmp_path, "killed")  # at its step-8 save
    chief, other = _two_workers(data, "victim", hparams, chief_prefix=hook)
    _wait_until_held(paused, [chief, other])
    other.proc.kill()
    killed = time.time()
    go.write_text("")
    assert chief.finish() == workers.EXIT_WORKER_DIED, chief.stderr[-3000:]
    assert time.time() - killed < 120  # TensorFlow's heartbeat timeout is 10 s
    assert re.search(r"worker /job:worker/replica:0/task:1 of this multi-worker run stopped "
                     r"answering \(.+\): it died \(killed, out of memory\)", chief.stderr), \
        chief.stderr[-3000:]
    assert "Traceback" not in chief.stderr
    assert _newest_step(model_dir) == 8

    for run in _two_workers(data, "victim", hparams) + references:
        assert run.finish() == 0, run.stderr[-3000:]
    got = _assert_bit_identical(os.path.join(data, "models", "reference"), model_dir)
    assert int(got["global_step"]) == steps
