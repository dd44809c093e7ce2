"""Tests for model/optimization.py: schedule, layer-wise multipliers, AdamW against numpy."""

import json
import os
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

import preloaded
from model import layers, optimization
from util import checkpoint

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ----------------------------------------------------------------------------------------------
# Learning-rate schedule
# ----------------------------------------------------------------------------------------------

# lr 2.0, 100 train steps, 10 warm-up steps, linear decay.
# Official: lr(s) = 2 * (1 - min(s, 100) / 100) * min(1, s / 10).
# Corrected: s < 10: 2 * s / 10; else 2 * (1 - clip((s - 10) / 90, 0, 1)).
SCHEDULE_CASES = [
    # step, official, corrected
    (0, 0.0, 0.0),  # warm-up factor 0 in both
    (5, 0.95, 1.0),  # official 2 * 0.95 * 0.5; corrected 2 * 0.5
    (10, 1.8, 2.0),  # official peaks at 2 * 0.9 (decay already ran 10 steps); corrected at 2
    (55, 0.9, 1.0),  # official 2 * 0.45; corrected 2 * (1 - 45 / 90)
    (100, 0.0, 0.0),  # end of training
    (150, 0.0, 0.0),  # clamped at 0 past num_train_steps
]


@pytest.mark.parametrize("step,official,corrected", SCHEDULE_CASES)
def test_schedule_official_and_corrected(step, official, corrected):
    kwargs = dict(learning_rate=2.0, num_train_steps=100, num_warmup_steps=10)
    got_official = optimization.learning_rate_schedule(step, **kwargs)
    got_corrected = optimization.learning_rate_schedule(step, decay_after_warmup=True, **kwargs)
    assert got_official.dtype == tf.float32
    np.testing.assert_allclose(got_official.numpy(), official, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(got_corrected.numpy(), corrected, rtol=1e-6, atol=1e-7)


def test_schedule_warmup_proportion_power_and_no_warmup():
    sched = optimization.learning_rate_schedule
    # warm-up = max(100 * 0.2, 10) = 20 steps. Official at step 10: 2 * 0.9 * 10 / 20 = 0.9.
    got = sched(10, 2.0, 100, num_warmup_steps=10, warmup_proportion=0.2)
    np.testing.assert_allclose(got.numpy(), 0.9, rtol=1e-6)
    # Corrected at step 10 with 20 warm-up steps: 2 * 10 / 20 = 1.0.
    got = sched(10, 2.0, 100, num_warmup_steps=10, warmup_proportion=0.2, decay_after_warmup=True)
    np.testing.assert_allclose(got.numpy(), 1.0, rtol=1e-6)
    # Power 2, official at step 50 (past warm-up 10): 2 * (1 - 0.5)^2 = 0.5.
    got = sched(50, 2.0, 100, num_warmup_steps=10, lr_decay_power=2.0)
    np.testing.assert_allclose(got.numpy(), 0.5, rtol=1e-6)
    # Power 2, corrected at step 55: 2 * (1 - 45 / 90)^2 = 0.5.
    got = sched(55, 2.0, 100, num_warmup_steps=10, lr_decay_power=2.0, decay_after_warmup=True)
    np.testing.assert_allclose(got.numpy(), 0.5, rtol=1e-6)
    # No warm-up: the full rate at step 0 (the official code would give 0/0 = NaN here).
    for corrected in (False, True):
        got = sched(0, 2.0, 100, decay_after_warmup=corrected)
        np.testing.assert_allclose(got.numpy(), 2.0, rtol=1e-6)
        # step 25, linear: 2 * 0.75 = 1.5 in both (nothing to warm up).
        got = sched(25, 2.0, 100, decay_after_warmup=corrected)
        np.testing.assert_allclose(got.numpy(), 1.5, rtol=1e-6)


def test_schedule_in_tf_function_and_xla_matches_eager():
    steps = tf.constant([0, 5, 10, 55, 100, 150], tf.int64)

    def all_steps(decay_after_warmup):
        return tf.stack([
            optimization.learning_rate_schedule(
                steps[i], 2.0, 100, num_warmup_steps=10, decay_after_warmup=decay_after_warmup)
            for i in range(6)
        ])

    for corrected in (False, True):
        expected = [row[2] if corrected else row[1] for row in SCHEDULE_CASES]
        eager = all_steps(corrected).numpy()
        graph = tf.function(all_steps)(corrected).numpy()
        xla = tf.function(all_steps, jit_compile=True)(corrected).numpy()
        np.testing.assert_allclose(eager, expected, rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(graph, eager, rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(xla, eager, rtol=1e-6, atol=1e-7)


def test_schedule_errors():
    with pytest.raises(ValueError, match="num_train_steps must be >= 1, got 0"):
        optimization.learning_rate_schedule(0, 1.0, 0)
    with pytest.raises(ValueError, match="must be >= 0"):
        optimization.learning_rate_schedule(0, 1.0, 10, num_warmup_steps=-1)


# ----------------------------------------------------------------------------------------------
# Layer-wise learning-rate multipliers
# ----------------------------------------------------------------------------------------------

TWO_LAYER_NAMES = [
    "electra/embeddings/word_embeddings:0",
    "electra/embeddings/LayerNorm/gamma",
    "electra/embeddings_project/kernel",
    "electra/encoder/layer_0/attention/self/query/kernel",
    "electra/encoder/layer_1/output/dense/bias",
    "task_specific/cola/dense/kernel",
]


def test_layerwise_official_two_layers():
    # decay 0.5, 2 layers, official exponent (2 + 2 - depth):
    # embeddings depth 0 -> 0.5^4, layer_0 depth 1 -> 0.5^3, layer_1 depth 2 -> 0.5^2,
    # task_specific depth 4 -> 0.5^0.
    got = optimization.layerwise_lr_multipliers(TWO_LAYER_NAMES, 0.5, 2)
    assert got == {
        "electra/embeddings/word_embeddings": 0.0625,
        "electra/embeddings/LayerNorm/gamma": 0.0625,
        "electra/embeddings_project/kernel": 0.0625,
        "electra/encoder/layer_0/attention/self/query/kernel": 0.125,
        "electra/encoder/layer_1/output/dense/bias": 0.25,
        "task_specific/cola/dense/kernel": 1.0,
    }


def test_layerwise_corrected_two_layers():
    # Corrected exponent (2 + 1 - depth), heads at depth 3: embeddings 0.5^3, layer_0 0.5^2,
    # layer_1 (the top layer) 0.5^1, heads 0.5^0.
    got = optimization.layerwise_lr_multipliers(TWO_LAYER_NAMES, 0.5, 2, official=False)
    assert got == {
        "electra/embeddings/word_embeddings": 0.125,
        "electra/embeddings/LayerNorm/gamma": 0.125,
        "electra/embeddings_project/kernel": 0.125,
        "electra/encoder/layer_0/attention/self/query/kernel": 0.25,
        "electra/encoder/layer_1/output/dense/bias": 0.5,
        "task_specific/cola/dense/kernel": 1.0,
    }


def test_layerwise_layer_1_does_not_match_layer_10():
    # 11 layers: layer_10 is depth 11 (official exponent 13 - 11 = 2), layer_1 depth 2 (exp 11).
    got = optimization.layerwise_lr_multipliers(
        ["electra/encoder/layer_10/output/dense/kernel", "electra/encoder/layer_1/x"], 0.5, 11)
    assert got == {
        "electra/encoder/layer_10/output/dense/kernel": 0.25,
        "electra/encoder/layer_1/x": 0.5**11,
    }


def test_layerwise_unmatched_name_is_an_error():
    with pytest.raises(ValueError, match=r"No layer-wise learning rate for variables "
                                         r"\['electra/pooler/dense/kernel'\]"):
        optimization.layerwise_lr_multipliers(
            TWO_LAYER_NAMES + ["electra/pooler/dense/kernel:0"], 0.8, 2)


# ----------------------------------------------------------------------------------------------
# AdamWeightDecay
# ----------------------------------------------------------------------------------------------


def numpy_adamw(params, grads_per_step, lrs, decayed, multipliers, bias_correction,
                wd=0.01, clip_norm=1.0, b1=0.9, b2=0.999, eps=1e-6):
    """Reference AdamW in float64 numpy, written from the update equations."""
    params = [np.array(p, np.float64) for p in params]
    ms = [np.zeros_like(p) for p in params]
    vs = [np.zeros_like(p) for p in params]
    norms = []
    for t, (grads, lr) in enumerate(zip(grads_per_step, lrs), start=1):
        grads = [np.array(g, np.float64) for g in grads]
        norm = np.sqrt(sum(np.sum(g * g) for g in grads))
        norms.append(norm)
        if clip_norm is not None:
            grads = [g * clip_norm / max(norm, clip_norm) for g in grads]
        for i, g in enumerate(grads):
            ms[i] = b1 * ms[i] + (1 - b1) * g
            vs[i] = b2 * vs[i] + (1 - b2) * g * g
            if bias_correction:
                m_hat, v_hat = ms[i] / (1 - b1**t), vs[i] / (1 - b2**t)
            else:
                m_hat, v_hat = ms[i], vs[i]
            update = m_hat / (np.sqrt(v_hat) + eps)
            if decayed[i]:
                update = update + wd * params[i]
            params[i] = params[i] - lr * multipliers[i] * update
    return params, ms, vs, norms


def make_variables():
    """A kernel (decayed), a bias and a LayerNorm gamma (both excluded from weight decay)."""
    return [
        tf.Variable([[0.5, -1.0, 2.0], [1.5, 0.25, -0.75]], name="layer_0/dense/kernel"),
        tf.Variable([0.1, -0.2, 0.3], name="layer_0/dense/bias"),
        tf.Variable([1.0, 1.0, 1.0], name="layer_0/LayerNorm/gamma"),
    ]


DECAYED = [True, False, False]
# Global norm of step 1 = sqrt(4 + 4 + 1 + 1 + 0.25 + 9 + 1 + 0.25 + 0 + 0.04 + 0.01 + 0.09)
#                       = sqrt(20.64) ~ 4.54 > 1: clipping is active.
GRADS_STEP_1 = [
    [[2.0, -2.0, 1.0], [1.0, 0.5, -3.0]],
    [1.0, -0.5, 0.0],
    [0.2, 0.1, -0.3],
]
GRADS_STEP_2 = [
    [[-1.0, 0.5, 0.25], [0.0, 2.0, 1.0]],
    [0.3, 0.3, -0.6],
    [0.05, -0.05, 0.5],
]


def test_one_step_hand_computed():
    """Two scalars, clipping active, numbers derived by hand (lr 0.1, wd 0.01)."""
    for bias_correction, expected_w, expected_b in (
        # Global norm sqrt(3^2 + 4^2) = 5, so clipped grads are 0.6 and -0.8.
        # Official, kernel: m = 0.06, v = 0.00036, sqrt(v) = 0.0189737;
        #   update = 0.06 / (0.0189737 + 1e-6) + 0.01 * 2 = 3.1621110 + 0.02 = 3.1821110;
        #   w = 2 - 0.1 * 3.1821110 = 1.6817889 (an effective step sqrt(10) times the lr).
        # Official, bias (no decay): update = -0.08 / (0.0252982 + 1e-6) = -3.1621527;
        #   b = 1 + 0.31621527 = 1.3162153.
        (False, 1.6817889, 1.3162153),
        # Corrected: m_hat = 0.6, sqrt(v_hat) = 0.6, update = 0.6 / 0.600001 + 0.02 = 1.0199983;
        #   w = 2 - 0.10199983 = 1.8980002. Bias: -0.8 / 0.800001 = -0.9999988; b = 1.0999999.
        (True, 1.8980002, 1.0999999),
    ):
        w = tf.Variable(2.0, name="dense/kernel")
        b = tf.Variable(1.0, name="dense/bias")
        opt = optimization.AdamWeightDecay(0.1, bias_correction=bias_correction)
        opt.build([w, b])
        norm = opt.apply([tf.constant(3.0), tf.constant(-4.0)], [w, b])
        np.testing.assert_allclose(norm.numpy(), 5.0, rtol=1e-6)
        np.testing.assert_allclose(w.numpy(), expected_w, rtol=1e-6)
        np.testing.assert_allclose(b.numpy(), expected_b, rtol=1e-6)
        # The slots hold the moments of the clipped gradients: m = 0.1 g, v = 0.001 g^2.
        np.testing.assert_allclose(opt.get_slot(w, "adam_m").numpy(), 0.06, rtol=1e-6)
        np.testing.assert_allclose(opt.get_slot(w, "adam_v").numpy(), 0.00036, rtol=1e-5)
        np.testing.assert_allclose(opt.get_slot(b, "adam_m").numpy(), -0.08, rtol=1e-6)
        assert opt.global_step.numpy() == 1


@pytest.mark.parametrize("bias_correction", [False, True])
@pytest.mark.parametrize("num_steps", [1, 2])
def test_steps_match_numpy_reference(bias_correction, num_steps):
    variables = make_variables()
    initial = [v.numpy() for v in variables]
    names = [checkpoint.checkpoint_name(v) for v in variables]
    multipliers = dict(zip(names, [1.0, 0.5, 0.25]))
    lr_fn = lambda step: optimization.learning_rate_schedule(step, 0.1, 10, num_warmup_steps=2)
    opt = optimization.AdamWeightDecay(
        lr_fn, bias_correction=bias_correction, lr_multipliers=multipliers)
    opt.build(variables)
    grads = [GRADS_STEP_1, GRADS_STEP_2][:num_steps]
    norms = [opt.apply([tf.constant(g) for g in step_grads], variables) for step_grads in grads]

    # Official schedule at steps 0 and 1: 0.1 * (1 - s / 10) * min(1, s / 2) = 0.0, 0.045.
    # The first update therefore leaves the parameters alone (but fills m and v).
    lrs = [0.0, 0.045][:num_steps]
    ref_params, ref_m, ref_v, ref_norms = numpy_adamw(
        initial, grads, lrs, DECAYED, [1.0, 0.5, 0.25], bias_correction)
    for var, ref in zip(variables, ref_params):
        np.testing.assert_allclose(var.numpy(), ref, rtol=1e-5, atol=1e-7)
    for var, m, v in zip(variables, ref_m, ref_v):
        np.testing.assert_allclose(opt.get_slot(var, "adam_m").numpy(), m, rtol=1e-5, atol=1e-8)
        np.testing.assert_allclose(opt.get_slot(var, "adam_v").numpy(), v, rtol=1e-5, atol=1e-10)
    np.testing.assert_allclose([n.numpy() for n in norms], ref_norms, rtol=1e-6)
    assert opt.global_step.numpy() == num_steps
    if num_steps == 2:
        # Second step really moved the parameters, differently with/without bias correction.
        assert not np.allclose(variables[0].numpy(), initial[0])


def test_constant_lr_weight_decay_exclusion_and_no_clipping():
    """With a zero gradient only weight decay moves a variable, and only the kernel decays."""
    variables = make_variables()
    initial = [v.numpy() for v in variables]
    opt = optimization.AdamWeightDecay(0.5, weight_decay_rate=0.1, clip_norm=None)
    opt.apply([tf.zeros_like(v) for v in variables], variables)
    # kernel: update = 0 / (0 + eps) + 0.1 * p, so p -> p - 0.5 * 0.1 * p = 0.95 p.
    np.testing.assert_allclose(variables[0].numpy(), 0.95 * initial[0], rtol=1e-6)
    np.testing.assert_allclose(variables[1].numpy(), initial[1])  # bias: excluded
    np.testing.assert_allclose(variables[2].numpy(), initial[2])  # LayerNorm: excluded


def test_none_gradient_is_skipped():
    variables = make_variables()
    initial = [v.numpy() for v in variables]
    opt = optimization.AdamWeightDecay(0.1)
    opt.build(variables)
    opt.apply([tf.constant(GRADS_STEP_1[0]), None, tf.constant(GRADS_STEP_1[2])], variables)
    np.testing.assert_array_equal(variables[1].numpy(), initial[1])
    np.testing.assert_array_equal(opt.get_slot(variables[1], "adam_m").numpy(), 0.0)
    assert not np.allclose(variables[0].numpy(), initial[0])


def test_slot_and_step_names_dtypes_and_tracking():
    variables = make_variables()
    opt = optimization.AdamWeightDecay(0.1)
    with tf.name_scope("some_outer_scope"):  # must not leak into slot names
        opt.build(variables)
    names = sorted(v.name for v in opt.variables)
    assert names == sorted([
        "global_step:0",
        "layer_0/dense/kernel/adam_m:0", "layer_0/dense/kernel/adam_v:0",
        "layer_0/dense/bias/adam_m:0", "layer_0/dense/bias/adam_v:0",
        "layer_0/LayerNorm/gamma/adam_m:0", "layer_0/LayerNorm/gamma/adam_v:0",
    ])
    assert opt.global_step.dtype == tf.int64
    for var in opt.variables:
        assert not var.trainable
        assert var.aggregation == tf.VariableAggregation.ONLY_FIRST_REPLICA
        if var.name != "global_step:0":
            assert var.dtype == tf.float32
    # Slots stay float32 even for a float16 variable.
    half = tf.Variable(tf.ones([2], tf.float16), name="half/kernel")
    opt16 = optimization.AdamWeightDecay(0.1)
    opt16.apply([tf.ones([2], tf.float16)], [half])
    assert opt16.get_slot(half, "adam_m").dtype == tf.float32
    assert half.dtype == tf.float16


def test_build_errors():
    variables = make_variables()
    opt = optimization.AdamWeightDecay(0.1)
    opt.build(variables[:2])
    with pytest.raises(ValueError, match="already built"):
        opt.build(variables)
    with pytest.raises(ValueError, match="not built for variable 'layer_0/LayerNorm/gamma'"):
        opt.apply([tf.zeros_like(v) for v in variables], variables)
    twin = [tf.Variable(1.0, name="same/kernel"), tf.Variable(2.0, name="same/kernel")]
    with pytest.raises(ValueError, match="must be unique"):
        optimization.AdamWeightDecay(0.1).build(twin)
    with pytest.raises(ValueError, match="lr_multipliers has no entry"):
        optimization.AdamWeightDecay(0.1, lr_multipliers={}).build(variables)


def run_two_steps(mode, bias_correction):
    """Two updates with a schedule and multipliers in eager, tf.function or XLA mode."""
    variables = make_variables()
    names = [checkpoint.checkpoint_name(v) for v in variables]
    opt = optimization.AdamWeightDecay(
        lambda step: optimization.learning_rate_schedule(
            step, 0.1, 10, num_warmup_steps=1, decay_after_warmup=True),
        bias_correction=bias_correction,
        lr_multipliers=dict(zip(names, [1.0, 0.5, 0.25])))
    opt.build(variables)

    def step(g0, g1, g2):
        return opt.apply([g0, g1, g2], variables)

    if mode == "function":
        step = tf.function(step)
    elif mode == "xla":
        step = tf.function(step, jit_compile=True)
    norms = [step(*[tf.constant(g) for g in grads]).numpy()
             for grads in (GRADS_STEP_1, GRADS_STEP_2)]
    state = [v.numpy() for v in variables] + [s.numpy() for s in opt.variables]
    return norms, state


@pytest.mark.parametrize("bias_correction", [False, True])
def test_tf_function_and_xla_match_eager(bias_correction):
    eager_norms, eager_state = run_two_steps("eager", bias_correction)
    for mode in ("function", "xla"):
        norms, state = run_two_steps(mode, bias_correction)
        np.testing.assert_allclose(norms, eager_norms, rtol=1e-6)
        for got, want in zip(state, eager_state):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)


def test_lazy_build_inside_tf_function():
    variables = make_variables()
    opt = optimization.AdamWeightDecay(0.1)
    step = tf.function(lambda: opt.apply([tf.constant(g) for g in GRADS_STEP_1], variables))
    step()
    step()
    assert opt.global_step.numpy() == 2
    assert opt.get_slot(variables[0], "adam_m").name == "layer_0/dense/kernel/adam_m:0"


def test_create_optimizer_layerwise():
    variables = [
        tf.Variable(tf.ones([4, 2]), name="electra/embeddings/word_embeddings"),
        tf.Variable(tf.ones([2, 2]), name="electra/encoder/layer_0/output/dense/kernel"),
        tf.Variable(tf.ones([2]), name="task_specific/cola/output/bias"),
    ]
    opt = optimization.create_optimizer(
        variables, 1e-3, 100, warmup_proportion=0.1, layerwise_lr_decay=0.8, num_layers=1,
        official_layerwise=False)
    assert opt.built
    # Corrected, 1 layer: embeddings 0.8^2, layer_0 (top) 0.8, heads 1.
    np.testing.assert_allclose(
        [opt.lr_multipliers[checkpoint.checkpoint_name(v)] for v in variables], [0.64, 0.8, 1.0])
    # Official schedule at step 5 of 10 warm-up steps: 1e-3 * 0.95 * 0.5.
    np.testing.assert_allclose(opt.learning_rate(tf.constant(5, tf.int64)).numpy(), 4.75e-4)
    with pytest.raises(ValueError, match="num_layers is required"):
        optimization.create_optimizer(variables, 1e-3, 100, layerwise_lr_decay=0.8)


def test_checkpoint_round_trip(tmp_path):
    variables = make_variables()
    opt = optimization.AdamWeightDecay(0.1)
    opt.apply([tf.constant(g) for g in GRADS_STEP_1], variables)
    path = tf.train.Checkpoint(optimizer=opt).write(str(tmp_path / "ckpt"))
    restored = optimization.AdamWeightDecay(0.1)
    restored.build(make_variables())
    tf.train.Checkpoint(optimizer=restored).read(path).assert_consumed()
    assert restored.global_step.numpy() == 1
    for a, b in zip(opt.variables, restored.variables):
        assert a.name == b.name
        np.testing.assert_array_equal(a.numpy(), b.numpy())


DISTRIBUTED_SCRIPT = textwrap.dedent("""
    import json, sys
    import tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration(), tf.config.LogicalDeviceConfiguration()])
    from model import optimization
    grads = json.loads(sys.argv[1])
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    agg = tf.VariableAggregation.ONLY_FIRST_REPLICA
    with strategy.scope():
        variables = [tf.Variable(v, name=n, aggregation=agg) for n, v in json.loads(sys.argv[2])]
        opt = optimization.AdamWeightDecay(0.1, bias_correction=True)
        opt.build(variables)

    @tf.function
    def train_step():
        def replica_step():
            # Gradients already all-reduced: every replica holds the same values.
            return opt.apply([tf.constant(g) for g in grads], variables)
        return strategy.run(replica_step)

    train_step()
    train_step()
    out = {v.name: [r.numpy().tolist() for r in strategy.experimental_local_results(v)]
           for v in variables + list(opt.variables)}
    print("RESULT " + json.dumps(out))
""")


def test_mirrored_strategy_replica_context(tmp_path):
    """apply inside strategy.run (tf.function, 2 replicas) equals the single-device result."""
    variables = make_variables()
    init = [[checkpoint.checkpoint_name(v), v.numpy().tolist()] for v in variables]
    env = dict(os.environ, PYTHONPATH=REPO_ROOT, TF_CPP_MIN_LOG_LEVEL="2")
    result = preloaded.run(
        [sys.executable, "-c", DISTRIBUTED_SCRIPT, json.dumps(GRADS_STEP_1), json.dumps(init)],
        capture_output=True, text=True, env=env, timeout=120, cwd=str(tmp_path))
    assert result.returncode == 0, result.stderr[-3000:]
    line = [l for l in result.stdout.splitlines() if l.startswith("RESULT ")][-1]
    distributed = json.loads(line[len("RESULT "):])

    opt = optimization.AdamWeightDecay(0.1, bias_correction=True)
    opt.build(variables)
    for _ in range(2):
        opt.apply([tf.constant(g) for g in GRADS_STEP_1], variables)
    expected = {v.name: v.numpy() for v in variables + list(opt.variables)}
    assert set(distributed) == set(expected)
    for name, replicas in distributed.items():
        assert len(replicas) == 2
        for value in replicas:  # both replicas hold the same, correct value
            np.testing.assert_allclose(value, expected[name], rtol=1e-6, atol=1e-7)


def _two_steps_state(fuse: bool, pass_norm: bool, second: str = "applied"):
    """Weights and optimizer state after step 1 and a second step: "applied", "skipped" (NaN
    gradients, only_if False) or "none"."""
    saved = optimization.FUSE_UPDATE, layers.MIN_FUSED_ELEMENTS
    # These variables are tiny: compiled only when no size threshold stands in the way.
    optimization.FUSE_UPDATE, layers.MIN_FUSED_ELEMENTS = fuse, 0
    try:
        variables = make_variables()
        opt = optimization.AdamWeightDecay(0.1, bias_correction=True)
        opt.build(variables)

        @tf.function
        def step(grads, apply):
            norm = tf.linalg.global_norm(grads) if pass_norm else None
            return opt.apply(grads, variables, global_norm=norm, only_if=apply)

        step([tf.constant(g) for g in GRADS_STEP_1], tf.constant(True))
        grads = [tf.constant(g) for g in GRADS_STEP_2]
        if second == "skipped":  # as a step with an overflow would hand them in
            grads[0] = tf.fill(grads[0].shape, np.nan)
        if second != "none":
            step(grads, tf.constant(second == "applied"))
        return [v.numpy() for v in variables] + [s.numpy() for s in opt.variables]
    finally:
        optimization.FUSE_UPDATE, layers.MIN_FUSED_ELEMENTS = saved


def test_compiled_update_matches_graph_ops_and_a_given_norm_changes_nothing():
    """The update compiled into one pass per variable computes what the graph ops compute, up to
    the fused multiply-adds' rounding; a norm handed in by the caller (the step engine has it)
    gives bit for bit the update of the norm computed inside."""
    compiled = _two_steps_state(fuse=True, pass_norm=False)
    graph = _two_steps_state(fuse=False, pass_norm=False)
    for got, want in zip(compiled, graph):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-12)
    for got, want in zip(_two_steps_state(fuse=True, pass_norm=True), compiled):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("fuse", [True, False])
def test_an_update_not_applied_leaves_weights_slots_and_step_as_they_were(fuse):
    """only_if False (the step engine's non-finite step): NaN gradients change nothing, bit for
    bit, and global_step does not advance."""
    skipped = _two_steps_state(fuse, pass_norm=True, second="skipped")
    for got, want in zip(skipped, _two_steps_state(fuse, pass_norm=True, second="none")):
        np.testing.assert_array_equal(got, want)

    def global_step(state):
        return [int(x) for x in state if np.ndim(x) == 0]

    assert global_step(skipped) == [1]
    assert global_step(_two_steps_state(fuse, pass_norm=True)) == [2]


def test_only_models_with_a_large_variable_compile_their_updates():
    """Compiling an update costs more than it saves on a tiny model's variables."""
    def traces_after_one_step(variables):
        before = optimization._compiled_adamw_update.experimental_get_tracing_count()
        opt = optimization.AdamWeightDecay(0.1)
        opt.build(variables)
        tf.function(lambda: opt.apply([tf.ones_like(v) for v in variables], variables))()
        return optimization._compiled_adamw_update.experimental_get_tracing_count() - before

    assert traces_after_one_step(make_variables()) == 0
    large = tf.Variable(tf.zeros([layers.MIN_FUSED_ELEMENTS]), name="layer_1/dense/kernel")
    assert traces_after_one_step(make_variables() + [large]) >= 1
