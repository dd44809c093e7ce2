"""Exact resume: a run SIGKILLed mid-way and re-run with the same command ends with the same
weights, optimizer slots and data position as a run that was never interrupted."""
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np

import pretrain_fixtures as fx
from util import checkpoint

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STEPS = 100


def _command(data_dir, name, hparams):
    return [sys.executable, os.path.join(REPO, "run_pretraining.py"), "--data-dir", data_dir,
            "--model-name", name, "--hparams", json.dumps(hparams)]


def _env():
    return dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL="2")


def _latest_step(model_dir):
    prefix = checkpoint.latest_valid(model_dir) if os.path.isdir(model_dir) else None
    return -1 if prefix is None else int(prefix.rsplit("-", 1)[1])


def test_sigkill_then_resume_equals_uninterrupted(tmp_path):
    data_dir = fx.write_data(str(tmp_path / "data"))
    hparams = fx.tiny_hparams(num_train_steps=STEPS, save_checkpoints_steps=10,
                              iterations_per_loop=1, num_warmup_steps=10)
    reference = subprocess.Popen(_command(data_dir, "reference", hparams), env=_env(),
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    victim = subprocess.Popen(_command(data_dir, "killed", hparams), env=_env(),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    killed_dir = os.path.join(data_dir, "models", "killed")
    deadline = time.time() + 240
    while _latest_step(killed_dir) < 10 and victim.poll() is None and time.time() < deadline:
        time.sleep(0.01)
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    interrupted_at = _latest_step(killed_dir)
    assert 10 <= interrupted_at < STEPS, f"the kill came too late (step {interrupted_at})"
    assert os.path.exists(os.path.join(killed_dir, ".run.lock"))  # left behind by the dead run

    # The same command again: takes over the stale lock and continues from the checkpoint.
    resumed = subprocess.run(_command(data_dir, "killed", hparams), env=_env(),
                             capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"resumed from" in resumed.stderr and "stale lock" in resumed.stderr
    _, reference_err = reference.communicate(timeout=300)
    assert reference.returncode == 0, reference_err[-3000:]

    expected = checkpoint.read_all(os.path.join(data_dir, "models", "reference"))
    got = checkpoint.read_all(killed_dir)
    assert set(got) == set(expected) and int(got["global_step"]) == STEPS
    for name, value in expected.items():
        np.testing.assert_allclose(got[name], value, rtol=1e-6, atol=1e-7, err_msg=name)
