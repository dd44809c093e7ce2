"""Short kill-and-resume checks with real SIGKILLs inside a write (tools/kill_resume.py runs the
long, randomised version: 10 kills each for pre-training and fine-tuning).

A run is killed by a hook just before a chosen rename of a checkpoint write (so the kill lands
exactly between two steps of the write), then the same command is run again; its final weights,
optimizer state and eval figures must equal those of a run that was never interrupted. The
pre-training re-run is itself stopped by SIGTERM at the same point of its own save, which must
complete that save first. (test_preemption.py covers signals and a kill inside the loop of
steps.)
"""
import json
import os
import signal
import subprocess
import sys

import numpy as np

import preloaded
import pretrain_fixtures as fx
from util import checkpoint, preemption

from tests.test_finetune_data import VOCAB, write_fixtures
from tests.test_preemption import (KILL_RESUME, _assert_bit_identical, _env, _no_temporaries,
                                   _script)


def _killed_inside(watch, pattern, ordinal, command, signal_name="KILL"):
    """Runs `command` until just before the `ordinal`-th os.replace onto a `pattern` file, where
    the process sends itself SIG`signal_name`."""
    return preloaded.run([sys.executable, KILL_RESUME, "--child", "--watch", str(watch),
                          "--pattern", pattern, "--op", "replace", "--ordinal", str(ordinal),
                          "--signal", signal_name, "--"] + command, env=_env(),
                         capture_output=True, text=True, timeout=600)


def _assert_same_tensors(expected_dir, got_dir):
    expected, got = checkpoint.read_all(expected_dir), checkpoint.read_all(got_dir)
    assert sorted(got) == sorted(expected)
    for name, value in expected.items():
        np.testing.assert_allclose(got[name], value, rtol=1e-6, atol=1e-7, err_msg=name)
    return got


def test_pretraining_killed_then_signalled_inside_saves_resumes_exactly(tmp_path):
    """Killed between the data-file and index renames of the step-8 save; the re-run is sent
    SIGTERM at the same point of its own step-8 save (then a second SIGTERM): the save completes
    and the run stops at step 8; the last re-run ends equal, bit for bit, to a run never
    interrupted. (One chain: each re-run after the first is also the previous stop's resume.)"""
    data = fx.write_data(str(tmp_path / "data"))
    hparams = fx.tiny_hparams(num_train_steps=12, save_checkpoints_steps=4, iterations_per_loop=2,
                              do_eval=True, keep_checkpoint_max=2)
    reference = preloaded.Popen(
        [sys.executable] + _script("run_pretraining.py", data, "reference", hparams),
        env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    model_dir = os.path.join(data, "models", "victim")
    command = _script("run_pretraining.py", data, "victim", hparams)

    # Killed inside the step-8 save: its data file is renamed into place, its index is not.
    killed = _killed_inside(model_dir, "model.ckpt-*.index", 2, command)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    names = os.listdir(model_dir)
    assert "model.ckpt-8.data-00000-of-00001" in names and "model.ckpt-8.index" not in names
    assert checkpoint.latest_valid(model_dir).endswith("model.ckpt-4")
    assert ".run.lock" in names

    # The re-run resumes from step 4 and takes over the dead run's lock; SIGTERM arrives
    # between its step-8 save's data file and index renames (its first save).
    signalled = _killed_inside(model_dir, "model.ckpt-*.index", 1, command, signal_name="TERM")
    assert signalled.returncode == preemption.EXIT_PREEMPTED, signalled.stderr[-3000:]
    assert "resumed from" in signalled.stderr and "model.ckpt-4 at step 4" in signalled.stderr
    assert "taking over stale lock" in signalled.stderr
    assert "stopped on SIGTERM at step 8" in signalled.stderr
    assert checkpoint.latest_valid(model_dir).endswith("model.ckpt-8")
    _no_temporaries(model_dir)

    resumed = preloaded.run([sys.executable] + command, env=_env(), capture_output=True,
                            text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "model.ckpt-8 at step 8" in resumed.stderr
    _, reference_err = reference.communicate(timeout=600)
    assert reference.returncode == 0, reference_err[-3000:]

    ref_dir = os.path.join(data, "models", "reference")
    assert int(_assert_bit_identical(ref_dir, model_dir)["global_step"]) == 12
    for name in ("unsup_results.json",):
        with open(os.path.join(ref_dir, "results", name)) as f:
            expected = json.load(f)
        with open(os.path.join(model_dir, "results", name)) as f:
            assert json.load(f) == expected, name
    # The kill's debris (the orphan data file, temporaries) is gone; two checkpoints are kept.
    assert sorted(n for n in os.listdir(model_dir) if n.startswith(("model.ckpt", ".tmp"))) == [
        "model.ckpt-12.data-00000-of-00001", "model.ckpt-12.index",
        "model.ckpt-8.data-00000-of-00001", "model.ckpt-8.index"]


def test_finetuning_killed_before_the_state_file_update_resumes_exactly(tmp_path):
    hparams = dict(task_names=["cola", "sst"], vocab_size=len(VOCAB), max_seq_length=16,
                   init_checkpoint="", train_batch_size=2, eval_batch_size=4,
                   predict_batch_size=4, num_train_epochs=3.0, learning_rate=1e-3,
                   adam_bias_correction=True, save_checkpoints_steps=2, embedding_size=16,
                   model_hparam_overrides={"hidden_size": 32, "num_hidden_layers": 2,
                                           "num_attention_heads": 2, "intermediate_size": 64,
                                           "max_position_embeddings": 64})
    for name in ("reference", "victim"):
        write_fixtures(tmp_path / name, tasks={"cola", "sst"})
        (tmp_path / name / "vocab.txt").write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
    reference = preloaded.Popen(
        [sys.executable] + _script("run_finetuning.py", tmp_path / "reference", "m", hparams),
        env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    command = _script("run_finetuning.py", tmp_path / "victim", "m", hparams)
    trial_dir = tmp_path / "victim" / "models" / "m" / "finetuning_models" / "cola,sst_model_1"

    # 9 steps (3 epochs of 3), checkpoints at steps 2, 3 (epoch end), 4, ...: killed after the
    # step-4 checkpoint is complete, before the `checkpoint` state file names it.
    killed = _killed_inside(tmp_path / "victim" / "models", "checkpoint", 3, command)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    assert 'model_checkpoint_path: "model.ckpt-3"' in (trial_dir / "checkpoint").read_text()
    assert checkpoint.latest_valid(str(trial_dir)).endswith("model.ckpt-4")

    resumed = preloaded.run([sys.executable] + command, env=_env(), capture_output=True,
                            text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resumed from" in resumed.stderr and "(step 4)" in resumed.stderr
    _, reference_err = reference.communicate(timeout=600)
    assert reference.returncode == 0, reference_err[-3000:]

    ref_trial = tmp_path / "reference" / "models" / "m" / "finetuning_models" / "cola,sst_model_1"
    assert int(_assert_same_tensors(str(ref_trial), str(trial_dir))["global_step"]) == 9
    results = "models/m/results/cola,sst_results.json"
    expected = json.loads((tmp_path / "reference" / results).read_text())
    assert json.loads((tmp_path / "victim" / results).read_text())["trials"] == expected["trials"]
    assert sorted(n for n in os.listdir(trial_dir) if n.startswith(("model.ckpt", ".tmp"))) == [
        "model.ckpt-9.data-00000-of-00001", "model.ckpt-9.index"]
