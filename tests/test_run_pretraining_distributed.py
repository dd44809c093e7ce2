"""tf.distribute: MirroredStrategy over two logical CPU devices (with and without gradient
accumulation) and MultiWorkerMirroredStrategy with two local worker processes (TF_CONFIG on
loopback ports) train the tiny model with the same loss curve and weights as one device on the
same global batch.

Dropout is off: it is drawn per replica. Masking and generator sampling are addressed by global
example index (pretrain/rng.py), so they are identical however the batch is split.
"""
import json
import os
import socket
import subprocess
import sys

import numpy as np
import pytest

import preloaded
import pretrain_fixtures as fx
from util import checkpoint
from util import training_utils as tu

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STEPS = 4

MIRRORED_SCRIPT = """
import json, sys
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
import run_pretraining
from configure_pretraining import PretrainingConfig
strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
assert strategy.num_replicas_in_sync == 2
for name, hparams in json.loads(sys.argv[2]).items():  # one process: imports paid once
    run_pretraining.train_or_eval(PretrainingConfig.from_hparams(name, sys.argv[1], hparams),
                                  strategy)
"""


def _hparams(**overrides):
    hparams = fx.tiny_hparams(num_train_steps=STEPS, iterations_per_loop=1,
                              save_checkpoints_steps=STEPS, **overrides)
    hparams["model_hparam_overrides"].update(hidden_dropout_prob=0.0,
                                             attention_probs_dropout_prob=0.0)
    return hparams


def _env():
    return dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL="2")


def _free_ports(n):
    sockets = [socket.socket() for _ in range(n)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def _curve(model_dir):
    scalars = tu.read_scalars(model_dir)
    return [v for _, v in scalars["train/loss"]], [v for _, v in scalars["train/global_norm"]]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    data_dir = fx.write_data(str(tmp_path_factory.mktemp("data")))
    # Accumulators are per-replica (ON_READ) variables: each replica sums its own
    # micro-batches, the all-reduce comes after.
    mirrored = {"mirrored": _hparams(),
                "mirrored_accumulation": _hparams(gradient_accumulation_steps=2)}
    procs = {"mirrored": preloaded.Popen(
        [sys.executable, "-c", MIRRORED_SCRIPT, data_dir, json.dumps(mirrored)],
        env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)}
    ports = _free_ports(2)
    cluster = {"worker": [f"127.0.0.1:{p}" for p in ports]}
    for index in range(2):
        env = _env()
        env["TF_CONFIG"] = json.dumps({"cluster": cluster,
                                       "task": {"type": "worker", "index": index}})
        procs[f"worker{index}"] = preloaded.Popen(
            [sys.executable, os.path.join(REPO, "run_pretraining.py"), "--data-dir", data_dir,
             "--model-name", "multi_worker", "--hparams",
             json.dumps(_hparams(strategy="multi_worker"))],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        # The single-device reference runs here while the others run.
        env_before = dict(os.environ)
        import run_pretraining
        from configure_pretraining import PretrainingConfig
        run_pretraining.train_or_eval(PretrainingConfig.from_hparams("single", data_dir,
                                                                     _hparams()))
        errors = {name: p.communicate(timeout=400)[1] for name, p in procs.items()}
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
    for name, p in procs.items():
        assert p.returncode == 0, f"{name} failed:\n{errors[name][-3000:]}"
    assert dict(os.environ) == env_before
    return {name: os.path.join(data_dir, "models", name)
            for name in ("single", "mirrored", "mirrored_accumulation", "multi_worker")}


@pytest.mark.parametrize("name", ["mirrored", "mirrored_accumulation", "multi_worker"])
def test_same_loss_curve_and_weights_as_one_device(runs, name):
    single_loss, single_norm = _curve(runs["single"])
    loss, norm = _curve(runs[name])
    assert len(single_loss) == STEPS and len(loss) == STEPS
    np.testing.assert_allclose(loss, single_loss, rtol=1e-5)
    np.testing.assert_allclose(norm, single_norm, rtol=1e-4)
    expected = checkpoint.read_all(runs["single"])
    got = checkpoint.read_all(runs[name])
    assert set(got) == set(expected)
    for key, value in expected.items():
        np.testing.assert_allclose(got[key], value, rtol=1e-4, atol=1e-6, err_msg=key)


def test_only_the_chief_writes(runs):
    files = sorted(os.listdir(runs["multi_worker"]))
    assert [f for f in files if f.startswith("events")] and "pretrain_config.json" in files
    assert not [f for f in files if f.startswith(".tmp")]
