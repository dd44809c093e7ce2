"""util/step_engine.py on a two-weight least-squares model: float16 skipped steps (counted or
not), the stop at a non-finite step, gradient accumulation, and the two ways to combine two
replicas (the average; the official TPU rule, clip_per_replica)."""
import json
import math
import os
import sys

import numpy as np
import pytest
import tensorflow as tf

import preloaded
from model import optimization
from util import step_engine
from util.loss_scale import INITIAL_SCALE

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
X = np.array([[1.0, 2.0], [3.0, -1.0], [0.5, 0.5], [-2.0, 1.0]], np.float32)
Y = np.array([[1.0], [2.0], [0.0], [-1.0]], np.float32)


def make_engine(y=Y, **options):
    w = tf.Variable([[0.5], [-0.5]], name="w")

    def loss_fn(features, micro_batch, *_):
        loss = tf.reduce_sum(tf.square(tf.matmul(features["x"], w) - features["y"]))
        return loss, tf.reshape(loss, [1])

    optimizer = optimization.create_optimizer([w], 0.1, 100, weight_decay_rate=0.0)
    engine = step_engine.StepEngine(
        tf.distribute.get_strategy(), optimizer, [w], inputs_fn=lambda f: (f, ()),
        loss_fn=loss_fn, metric_names=("loss",), state_prefix="test_state/", **options)
    data = tf.data.Dataset.from_tensors({"x": X, "y": y}).repeat()
    return engine, w, iter(data)


@pytest.mark.parametrize("count_skipped_steps", [False, True])
def test_float16_overflow_skips_the_update_and_halves_the_scale(count_skipped_steps):
    engine, w, data = make_engine(float16=True, count_skipped_steps=count_skipped_steps)
    assert engine.scaling.scale.numpy() == INITIAL_SCALE
    engine.scaling.scale.assign(1e38)  # the scaled loss overflows
    before = w.numpy()
    steps = engine.run(data, 1)
    assert steps.finite and steps.ran == 1 and steps.last["global_norm"] == 0.0
    np.testing.assert_array_equal(w.numpy(), before)
    assert engine.scaling.scale.numpy() == pytest.approx(5e37)
    # Fine-tuning counts the step (data order follows global_step), pre-training does not.
    assert int(engine.optimizer.global_step.numpy()) == steps.counted == int(count_skipped_steps)
    assert steps.sums["loss"] == (steps.last["loss"] if count_skipped_steps else 0.0)
    assert sorted(engine.checkpoint_variables([w])) == [
        "global_step", "test_state/loss_scale", "test_state/loss_scale_good_steps", "w",
        "w/adam_m", "w/adam_v"]

    engine.scaling.scale.assign(1024.0)
    applied = engine.run(data, 2)
    assert applied.counted == 2 and applied.last["global_norm"] > 0
    assert not np.array_equal(w.numpy(), before)


def test_non_finite_step_stops_the_loop_without_update():
    engine, w, data = make_engine(y=np.full_like(Y, math.nan), float16=False)
    before = w.numpy()
    steps = engine.run(data, 5)
    assert not steps.finite and steps.ran == 1 and steps.counted == 0
    assert math.isnan(steps.last["loss"])
    np.testing.assert_array_equal(w.numpy(), before)
    assert int(engine.optimizer.global_step.numpy()) == 0
    assert engine.scaling is None and sorted(engine.checkpoint_variables([w])) == [
        "global_step", "w", "w/adam_m", "w/adam_v"]


def test_accumulated_micro_batches_make_the_whole_batch_step():
    whole, w_whole, data = make_engine(float16=False)
    whole_steps = whole.run(data, 3)
    split, w_split, data = make_engine(float16=False, accumulation_steps=2)
    split_steps = split.run(data, 3)
    np.testing.assert_allclose(w_split.numpy(), w_whole.numpy(), rtol=1e-6)
    np.testing.assert_allclose(split_steps.sums["loss"], whole_steps.sums["loss"], rtol=1e-6)


TWO_REPLICAS = """
import json, sys
import numpy as np
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
from model import optimization
from util import step_engine
X = np.array(json.loads(sys.argv[1]), np.float32)
Y = np.array(json.loads(sys.argv[2]), np.float32)
strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
data = tf.data.Dataset.from_tensor_slices({"x": X, "y": Y}).batch(4).repeat()
out = {}
for name, options in (("mean", dict(float16=True, mean_over_replicas=True)),
                      ("clip_per_replica", dict(float16=False, clip_per_replica=1.0))):
    with strategy.scope():
        w = tf.Variable([[0.5], [-0.5]], name="w")
        optimizer = optimization.create_optimizer(
            [w], 0.1, 100, weight_decay_rate=0.0,
            clip_norm=None if "clip_per_replica" in options else 1.0)

    def loss_fn(features, micro_batch, *_, w=w):
        loss = tf.reduce_sum(tf.square(tf.matmul(features["x"], w) - features["y"]))
        return loss, tf.reshape(loss, [1])

    engine = step_engine.StepEngine(strategy, optimizer, [w], inputs_fn=lambda f: (f, ()),
                                    loss_fn=loss_fn, metric_names=("loss",), state_prefix="s/",
                                    count_skipped_steps=True, **options)
    steps = engine.run(iter(strategy.experimental_distribute_dataset(data)), 3)
    out[name] = {"w": w.numpy().tolist(), "loss": float(steps.sums["loss"]),
                 "step": int(optimizer.global_step.numpy())}
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def two_replicas():
    out = preloaded.run([sys.executable, "-c", TWO_REPLICAS, json.dumps(X.tolist()),
                         json.dumps(Y.tolist())], env=dict(os.environ, PYTHONPATH=REPO,
                                                           TF_CPP_MIN_LOG_LEVEL="2"),
                        capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_float16_on_two_replicas_averages_the_replicas_gradients(two_replicas):
    # Each replica sums its 2 rows; the average of the two sums is half the one-device gradient.
    got = two_replicas["mean"]
    w = tf.Variable([[0.5], [-0.5]], name="w")
    optimizer = optimization.create_optimizer([w], 0.1, 100, weight_decay_rate=0.0)
    loss_sum = 0.0
    for _ in range(got["step"]):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.square(tf.matmul(X, w) - Y))
        optimizer.apply([tape.gradient(loss, w) / 2.0], [w])
        loss_sum += float(loss)
    assert got["step"] == 3
    np.testing.assert_allclose(got["w"], w.numpy(), rtol=1e-5)
    np.testing.assert_allclose(got["loss"], loss_sum, rtol=1e-5)


def test_clip_per_replica_sums_each_replicas_clipped_gradient(two_replicas):
    # The official TPU rule by hand: replica r's gradient (rows 2r, 2r + 1) clipped at norm 1,
    # the two clipped gradients summed, then AdamW without a second clip.
    got = two_replicas["clip_per_replica"]
    w = np.array([[0.5], [-0.5]], np.float64)
    m = v = np.zeros_like(w)
    loss_sum, clipped = 0.0, 0
    for step in range(got["step"]):
        total = np.zeros_like(w)
        for rows in (slice(0, 2), slice(2, 4)):
            residual = X[rows] @ w - Y[rows]
            loss_sum += float(np.sum(residual ** 2))
            grad = 2.0 * X[rows].T @ residual
            norm = np.linalg.norm(grad)
            clipped += norm > 1.0
            total += grad * min(1.0, 1.0 / norm)
        lr = 0.1 * (1.0 - step / 100.0)  # no warm-up, linear decay
        m = 0.9 * m + 0.1 * total
        v = 0.999 * v + 0.001 * total ** 2
        w = w - lr * m / (np.sqrt(v) + 1e-6)
    assert got["step"] == 3 and clipped >= 3  # the clip was active
    np.testing.assert_allclose(got["w"], w, rtol=1e-5)
    np.testing.assert_allclose(got["loss"], loss_sum, rtol=1e-5)
