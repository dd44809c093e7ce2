"""The paper's objectives (pretrain/objectives/ and their wiring in PretrainingModel): each loss
against a small numpy reference or a behavioural property, on tiny models."""
import importlib.util
import pathlib

import numpy as np
import pytest
import tensorflow as tf

from configure_pretraining import PretrainingConfig
from pretrain import masking, pretrain_data
from pretrain.objectives import functions
from pretrain import rng as rng_lib
from pretrain.pretraining_model import PretrainingModel
from util import checkpoint
from util.hparams import HParamError

V, L = 40, 16
SPECIAL = masking.SpecialIds(pad=0, cls=1, sep=2, mask=3)
BASE = {"vocab_size": V, "max_seq_length": L, "embedding_size": 16,
        "generator_hidden_size": 0.5,
        "model_hparam_overrides": {"hidden_size": 32, "num_hidden_layers": 2,
                                   "num_attention_heads": 2, "intermediate_size": 64,
                                   "max_position_embeddings": 32}}


def _config(**hparams) -> PretrainingConfig:
    return PretrainingConfig.from_hparams("t", "/nonexistent", dict(BASE, **hparams))


def _features(batch=3, seed=0):
    ids = np.random.RandomState(seed).randint(4, V, size=[batch, L]).astype(np.int32)
    ids[:, 0], ids[:, -1] = SPECIAL.cls, SPECIAL.sep
    mask = np.ones([batch, L], np.int32)
    mask[0, 12:] = 0
    ids[0, 12:] = SPECIAL.pad
    return {"input_ids": tf.constant(ids), "input_mask": tf.constant(mask),
            "segment_ids": tf.zeros([batch, L], tf.int32)}


def _run(model, training=False, step=1, features=None):
    rng = rng_lib.ExampleRng(0, tf.constant(step, tf.int64))
    masked = model.mask(features or _features(), rng)
    seed = tf.constant([1, 2], tf.int64) if training else None
    return masked, model(masked, training=training, rng=rng, dropout_seed=seed)


def _tool(name):
    """A module of tools/ (scripts, not a package)."""
    path = pathlib.Path(__file__).resolve().parent.parent / "tools" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _sigmoid_xent(logit, label):
    return np.maximum(logit, 0) - logit * label + np.log1p(np.exp(-np.abs(logit)))


class _Recorder:
    """Stands in for an encoder and records the ids it was called with."""

    def __init__(self, encoder):
        self.encoder, self.calls = encoder, []
        self.embeddings = encoder.embeddings

    def __call__(self, input_ids, *args, **kwargs):
        self.calls.append(input_ids.numpy())
        return self.encoder(input_ids, *args, **kwargs)


# -- hparams ------------------------------------------------------------------------------------

@pytest.mark.parametrize("hparams,key", [
    ({"electra_15": True, "electra_objective": False}, "electra_15"),
    ({"replace_mlm": True}, "replace_mlm"),
    ({"all_tokens_mlm": True, "electra_objective": False, "replace_mlm": True}, "all_tokens_mlm"),
    ({"unigram_generator": True, "uniform_generator": True}, "unigram_generator"),
    ({"adversarial_generator": True, "uniform_generator": True}, "adversarial_generator"),
    ({"electric_objective": True}, "electric_objective"),
])
def test_impossible_combinations_name_the_hparam(hparams, key):
    with pytest.raises(HParamError, match=key):
        _config(**hparams)


# -- weight sharing -----------------------------------------------------------------------------

def test_tied_untied_and_tied_embeddings_variables():
    names = set(PretrainingModel(_config(), SPECIAL).model_variables())
    assert "generator/encoder/layer_0/attention/self/query/kernel" in names
    assert not any(n.startswith("generator/embeddings/") for n in names)  # tied embeddings
    untied = set(PretrainingModel(_config(untied_generator_embeddings=True),
                                  SPECIAL).model_variables())
    assert "generator/embeddings/word_embeddings" in untied
    tied_all = set(PretrainingModel(_config(untied_generator=False), SPECIAL).model_variables())
    assert not any(n.startswith("generator/") for n in tied_all)
    assert "discriminator_predictions/dense/kernel" in tied_all


# -- ELECTRA 15% --------------------------------------------------------------------------------

def test_electra_15_loss_counts_only_masked_positions():
    model = PretrainingModel(_config(electra_15=True), SPECIAL)
    masked, out = _run(model)
    probs = out.disc_probs.numpy()
    logits = np.log(probs) - np.log1p(-probs)
    positions, weights = masked.masked_lm_positions.numpy(), masked.masked_lm_weights.numpy()
    chosen = np.zeros([probs.shape[0], L])
    for b in range(probs.shape[0]):
        chosen[b, positions[b][weights[b] > 0]] = 1
    expected = (_sigmoid_xent(logits, out.disc_labels.numpy()) * chosen).sum() / chosen.sum()
    np.testing.assert_allclose(float(out.disc_loss), expected, rtol=1e-4)
    # The full-ELECTRA loss (same weights, same seed) averages over every real token instead.
    full = PretrainingModel(_config(), SPECIAL)
    _, full_out = _run(full)
    mask = full_out.input_mask.numpy()
    assert mask.sum() > chosen.sum()


# -- Replace MLM / All-Tokens MLM ---------------------------------------------------------------

def test_replace_mlm_reads_generator_samples_not_mask_tokens():
    model = PretrainingModel(_config(electra_objective=False, replace_mlm=True), SPECIAL)
    recorder = _Recorder(model.discriminator_encoder)
    model.discriminator_encoder = recorder
    masked, out = _run(model)
    seen = recorder.calls[-1]
    original = masking.unmask(masked).numpy()
    assert not (seen == SPECIAL.mask).any()
    positions, weights = masked.masked_lm_positions.numpy(), masked.masked_lm_weights.numpy()
    sampled = out.sampled_ids.numpy()
    changed = np.zeros_like(seen, bool)
    for b in range(seen.shape[0]):
        for n in np.flatnonzero(weights[b]):
            assert seen[b, positions[b, n]] == sampled[b, n]
            changed[b, positions[b, n]] = True
    np.testing.assert_array_equal(seen[~changed], original[~changed])
    # The reported masked-LM loss is the main model's cross-entropy at the masked positions.
    w = masked.masked_lm_weights.numpy()
    np.testing.assert_allclose(float(out.mlm_loss),
                               (w * out.masked_lm_example_loss.numpy()).sum() / w.sum(),
                               rtol=1e-5)


def test_copy_mechanism_nll_matches_numpy():
    rs = np.random.RandomState(1)
    logits = rs.randn(2, 5, 7).astype(np.float32)
    copy = rs.randn(2, 5).astype(np.float32)
    inputs = rs.randint(0, 7, [2, 5]).astype(np.int32)
    targets = np.where(rs.rand(2, 5) < 0.5, inputs, rs.randint(0, 7, [2, 5])).astype(np.int32)
    got = functions.copy_mechanism_nll(tf.constant(logits), tf.constant(copy),
                                        tf.constant(inputs), tf.constant(targets)).numpy()
    softmax = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    d = 1 / (1 + np.exp(-copy))
    p_target = np.take_along_axis(softmax, targets[..., None], -1)[..., 0]
    expected = -np.log(d * (inputs == targets) + (1 - d) * p_target)
    np.testing.assert_allclose(got, expected, rtol=1e-5)
    preds = functions.copy_mechanism_predictions(tf.constant(logits), tf.constant(100 + copy),
                                                  tf.constant(inputs)).numpy()
    np.testing.assert_array_equal(preds, inputs)  # certain copying predicts the input


def test_all_tokens_mlm_trains_copy_head_and_main_mlm():
    model = PretrainingModel(_config(electra_objective=False, all_tokens_mlm=True), SPECIAL)
    variables = model.model_variables()
    with tf.GradientTape() as tape:
        _, out = _run(model, training=True)
    grads = dict(zip(variables, tape.gradient(out.total_loss, list(variables.values()))))
    for name in ("discriminator_predictions/dense_1/kernel", "mlm_predictions/output_bias",
                 "generator_predictions/output_bias", "electra/encoder/layer_1/output/dense/kernel"):
        assert grads[name] is not None and float(tf.reduce_max(tf.abs(
            tf.convert_to_tensor(grads[name])))) > 0, name
    assert np.isfinite(float(out.total_loss))


# -- unigram generator --------------------------------------------------------------------------

def test_unigram_counts_from_tfrecords_and_sampling(tmp_path):
    rs = np.random.RandomState(2)
    rows, expected = [], np.zeros(V, np.int64)
    for _ in range(20):
        n = rs.randint(3, L)
        tokens = [SPECIAL.cls] + list(rs.choice([5, 6, 7], size=n - 2, p=[0.7, 0.2, 0.1])) + \
            [SPECIAL.sep]
        np.add.at(expected, tokens, 1)
        rows.append(pretrain_data.serialize_example(
            tokens + [0] * (L - n), [1] * n + [0] * (L - n), [0] * L))
    path = str(tmp_path / "pretrain_data.tfrecord-0-of-1")
    pretrain_data.write_examples(path, rows)
    counts = functions.count_unigrams([path], V, L)
    np.testing.assert_array_equal(counts, expected)
    logits = functions.unigram_logits(counts, SPECIAL)
    probs = np.exp(logits)
    assert probs[list(SPECIAL)].max() < 1e-30  # special tokens are never sampled
    np.testing.assert_allclose(probs.sum(), 1.0, rtol=1e-5)
    np.testing.assert_allclose(probs[5] / probs[6], (expected[5] + 0.5) / (expected[6] + 0.5),
                               rtol=1e-5)
    model = PretrainingModel(_config(unigram_generator=True), SPECIAL, unigram_counts=counts)
    assert not any(n.startswith("generator") for n in model.model_variables())
    sampled = np.concatenate([_run(model, step=s)[1].sampled_ids.numpy().ravel()
                              for s in range(8)])
    share = np.mean(sampled == 5)
    assert 0.55 < share < 0.85  # ~0.7 of the counted tokens are 5


# -- adversarial generator (Appendix F) ---------------------------------------------------------

def test_reinforce_losses_match_numpy_and_gradient():
    rs = np.random.RandomState(3)
    logp = tf.constant(np.log(rs.uniform(0.05, 0.9, [2, 3])).astype(np.float32))
    rewards = rs.uniform(0.1, 2.0, [2, 3]).astype(np.float32)
    z = rs.randn(2, 3).astype(np.float32)
    w = np.array([[1, 1, 0], [1, 1, 1]], np.float32)
    with tf.GradientTape() as tape:
        tape.watch(logp)
        policy, base = functions.reinforce_losses(logp, tf.constant(rewards), tf.constant(z),
                                                   tf.constant(w), tf.constant(w.sum()))
    b = -np.log(1 / (1 + np.exp(-z)))
    np.testing.assert_allclose(float(policy),
                               -(w * logp.numpy() * (rewards - b)).sum() / w.sum(), rtol=1e-5)
    np.testing.assert_allclose(float(base),
                               (w * _sigmoid_xent(z, np.exp(-rewards))).sum() / w.sum(), rtol=1e-5)
    # d policy / d log p = -w (R - b) / sum(w): samples with reward above baseline get pushed up.
    np.testing.assert_allclose(tape.gradient(policy, logp).numpy(), -w * (rewards - b) / w.sum(),
                               rtol=1e-5)


def test_adversarial_generator_replaces_the_likelihood_loss():
    model = PretrainingModel(_config(adversarial_generator=True, disc_weight=0.0), SPECIAL)
    variables = model.model_variables()
    with tf.GradientTape() as tape:
        masked, out = _run(model, training=True)
    grads = dict(zip(variables, tape.gradient(out.total_loss, list(variables.values()))))
    assert grads["generator_baseline/dense/kernel"] is not None
    # The total is not the MLE loss: with disc_weight 0 it is the REINFORCE + baseline losses.
    assert abs(float(out.total_loss) - float(out.mlm_loss)) > 1e-3


# -- two-stage training -------------------------------------------------------------------------

def test_two_stage_init_and_frozen_generator(tmp_path):
    stage1 = PretrainingModel(_config(electra_objective=False), SPECIAL)
    prefix = str(tmp_path / "stage1" / "model.ckpt-1")
    checkpoint.save_tensors(prefix, {k: v.numpy() for k, v in stage1.model_variables().items()})
    out_prefix = str(tmp_path / "stage2_init" / "model.ckpt-0")
    _tool("two_stage_init").make_two_stage_init(prefix, out_prefix)
    stage2 = PretrainingModel(_config(freeze_generator=True, generator_hidden_size=1.0,
                                      seed=5), SPECIAL)
    report = checkpoint.restore(stage2.model_variables(), out_prefix, allow_missing=True)
    assert "generator/encoder/layer_1/output/dense/kernel" in report.restored
    v2 = stage2.model_variables()
    for name in ("encoder/layer_0/output/dense/kernel", "embeddings/word_embeddings"):
        np.testing.assert_array_equal(v2["generator/" + name].numpy(), v2["electra/" + name].numpy())
    assert not v2["generator/embeddings/word_embeddings"].trainable
    frozen = [n for n, v in v2.items() if not v.trainable]
    assert frozen and all(n.startswith(("generator/", "generator_predictions/")) for n in frozen)
    assert all(v.trainable for n, v in v2.items() if n.startswith("electra/"))
    trainable = [v for v in v2.values() if v.trainable]
    with tf.GradientTape() as tape:
        _, out = _run(stage2, training=True)
    grads = tape.gradient(out.total_loss, trainable)
    assert all(g is not None for g in grads[:3])


def test_two_stage_init_refuses_to_write_over_its_input_in_any_spelling(tmp_path):
    tensors = {"generator_predictions/output_bias": np.zeros(3, np.float32),
               "electra/embeddings/word_embeddings": np.ones((3, 2), np.float32)}
    prefix = str(tmp_path / "stage1" / "model.ckpt-1")
    checkpoint.save_tensors(prefix, tensors)
    before = {p.name: p.read_bytes() for p in (tmp_path / "stage1").iterdir()}
    with pytest.raises(ValueError, match=r"output_prefix file://.*stage1/\.\./stage1/model\.ckpt-1 "
                                         r"is the stage-1 checkpoint .*stage1/model\.ckpt-1"):
        _tool("two_stage_init").make_two_stage_init(
            str(tmp_path / "stage1"), f"file://{tmp_path}/stage1/../stage1/model.ckpt-1")
    assert {p.name: p.read_bytes() for p in (tmp_path / "stage1").iterdir()} == before


# -- Electric -----------------------------------------------------------------------------------

def test_directional_towers_and_cloze_never_see_their_own_token():
    model = PretrainingModel(_config(electric_objective=True, two_tower_generator=True,
                                     electra_objective=False), SPECIAL)
    feats = _features(batch=1, seed=4)
    ids = feats["input_ids"].numpy()
    tower = model.generator.towers
    base = tower.ltr(feats["input_ids"], feats["input_mask"], feats["segment_ids"],
                     training=False).sequence_output.numpy()
    changed = ids.copy()
    changed[0, 5] = 4 if ids[0, 5] != 4 else 5
    after = tower.ltr(tf.constant(changed), feats["input_mask"], feats["segment_ids"],
                      training=False).sequence_output.numpy()
    np.testing.assert_allclose(after[0, :5], base[0, :5], atol=1e-5)  # left of 5: unchanged
    assert np.abs(after[0, 5:12] - base[0, 5:12]).max() > 1e-4
    reprs = tower(feats["input_ids"], feats["input_mask"], feats["segment_ids"], training=False)
    reprs2 = tower(tf.constant(changed), feats["input_mask"], feats["segment_ids"],
                   training=False)
    np.testing.assert_allclose(reprs2.numpy()[0, 5], reprs.numpy()[0, 5], atol=1e-5)
    _, out = _run(model, training=True)
    assert np.isfinite(float(out.total_loss))
    # Electric labels every written position as noise, even a sample equal to the original.
    np.testing.assert_array_equal(out.disc_labels.numpy().sum(), out.masked_lm_weights.numpy().sum())


def test_electric_logits_match_numpy():
    rs = np.random.RandomState(5)
    disc = rs.randn(2, 4).astype(np.float32)
    cloze = rs.randn(2, 4, 6).astype(np.float32)
    ids = rs.randint(0, 6, [2, 4]).astype(np.int32)
    log_q = cloze - np.log(np.exp(cloze).sum(-1, keepdims=True))
    got = functions.electric_logits(tf.constant(disc), tf.constant(log_q), tf.constant(ids), 0.15)
    expected = disc + np.take_along_axis(log_q, ids[..., None], -1)[..., 0] + np.log(0.15 / 0.85)
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-5)


# -- ELECTRA as a masked LM (Appendix G) --------------------------------------------------------

def test_appendix_g_score_and_eval():
    p_g = np.array([0.5, 0.3, 0.2], np.float32)
    d = np.array([0.2, 0.9, 0.5], np.float32)
    a = 0.85 / 0.15
    got = functions.electra_mlm_scores(tf.constant(np.log(p_g)), tf.constant(d), 0.15).numpy()
    np.testing.assert_allclose(got, d * p_g / (a * (1 - d) + p_g), rtol=1e-5)
    assert np.argmax(got) == 1  # D's confidence overrides the generator's first choice
    model = PretrainingModel(_config(), SPECIAL)
    rng = rng_lib.ExampleRng(0, tf.constant(-1, tf.int64))
    masked = model.mask(_features(), rng)
    sums = _tool("electra_as_mlm").electra_as_mlm(model, masked, top_k=V, chunk=13)
    assert sums["weight"] > 0
    assert sums["in_top_k"] == sums["weight"]  # all V tokens are candidates
    assert 0 <= sums["electra_correct"] <= sums["weight"]


# -- FLOPs accounting (experiments/flops.py) ----------------------------------------------------

def test_flops_count_matmuls_and_objectives():
    from experiments.flops import encoder_forward_flops, pretrain_step_flops
    cfg = _config().bert_config()
    b, h, f, e = 2, 32, 64, 16
    per_layer = 8 * b * L * h * h + 4 * b * L * L * h + 4 * b * L * h * f
    assert encoder_forward_flops(cfg, b, L) == 2 * b * L * e * h + 2 * per_layer
    electra = pretrain_step_flops(_config())
    bert = pretrain_step_flops(_config(electra_objective=False))
    uniform = pretrain_step_flops(_config(uniform_generator=True))
    frozen = pretrain_step_flops(_config(freeze_generator=True, generator_hidden_size=1.0))
    assert uniform["generator"] == 0 and electra["generator"] > 0
    assert electra["total"] == electra["generator"] + electra["discriminator"]
    assert bert["total"] > 0 and frozen["generator"] * 3 > electra["generator"]
