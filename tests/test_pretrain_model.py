"""PretrainingModel: variable names and sharing, labels, losses against numpy, gradient flow."""
import numpy as np
import pytest
import tensorflow as tf

import pretrain_fixtures as fx
from configure_pretraining import PretrainingConfig
from pretrain import masking
from pretrain import rng as rng_lib
from pretrain.pretraining_model import PretrainingModel

SPECIAL = masking.SpecialIds(pad=fx.PAD, cls=fx.CLS, sep=fx.SEP, mask=fx.MASK)


def make_model(**overrides):
    config = PretrainingConfig.from_hparams("m", "/nonexistent", fx.tiny_hparams(**overrides))
    return PretrainingModel(config, SPECIAL)


def make_batch(n=6, seed=0):
    rs = np.random.RandomState(seed)
    successor = rs.permutation(fx.NUM_WORDS)
    rows = [fx.make_example(rs, successor) for _ in range(n)]
    ids, mask, segs = (tf.constant(np.array(col, np.int32)) for col in zip(*rows))
    return {"input_ids": ids, "input_mask": mask, "segment_ids": segs}


def run(model, features, step=0, training=True):
    rng = rng_lib.ExampleRng(3, tf.constant(step, tf.int64), 0)
    masked = model.mask(features, rng)
    out = model(masked, training=training, rng=rng, dropout_seed=tf.constant([1, step]))
    return masked, out


def test_official_variable_names_and_one_shared_embedding_table():
    model = make_model()
    names = set(model.model_variables())
    for name in ["electra/embeddings/word_embeddings", "electra/embeddings/position_embeddings",
                 "electra/embeddings_project/kernel",
                 "electra/encoder/layer_1/attention/self/query/kernel",
                 "generator/encoder/layer_0/output/LayerNorm/gamma",
                 "generator_predictions/dense/kernel", "generator_predictions/LayerNorm/beta",
                 "generator_predictions/output_bias", "discriminator_predictions/dense/kernel",
                 "discriminator_predictions/dense_1/kernel",
                 "discriminator_predictions/dense_1/bias"]:
        assert name in names, name
    assert not any(n.startswith("generator/embeddings/") for n in names)
    # Generator hidden 16 = embedding size 16: no projection (the discriminator, 32, has one).
    assert "generator/embeddings_project/kernel" not in names
    assert model.generator.encoder.embeddings is model.discriminator_encoder.embeddings
    tables = [v for v in model.model_variables().values() if "word_embeddings" in v.name]
    assert len(tables) == 1
    gen = model.generator_config
    assert (gen.hidden_size, gen.num_attention_heads, gen.intermediate_size) == (16, 1, 64)


def test_untied_embeddings_and_fully_tied_generator():
    untied = make_model(untied_generator_embeddings=True)
    names = set(untied.model_variables())
    assert untied.model_variables()["generator/embeddings/word_embeddings"].shape == [32, 16]
    assert "generator/embeddings_project/kernel" not in names  # embedding size = hidden size
    tied = make_model(untied_generator=False)
    assert tied.generator.encoder is tied.discriminator_encoder
    assert not any(n.startswith("generator/") for n in tied.model_variables())
    assert tied.model_variables()["generator_predictions/dense/kernel"].shape == [32, 16]
    _, out = run(tied, make_batch())
    assert np.isfinite(out.total_loss.numpy())


def test_labels_and_losses_match_a_numpy_reference():
    model = make_model()
    features = make_batch()
    masked, out = run(model, features, training=False)
    original = features["input_ids"].numpy()
    positions = masked.masked_lm_positions.numpy()
    weights = masked.masked_lm_weights.numpy()
    sampled = out.sampled_ids.numpy()

    # Fake ids and labels: samples written at the chosen positions; equal samples are "real".
    fake = original.copy()
    for b in range(len(fake)):
        for p, s, w in zip(positions[b], sampled[b], weights[b]):
            if w > 0:
                fake[b, p] = s
    expected_labels = (fake != original).astype(np.int32)
    np.testing.assert_array_equal(out.disc_labels.numpy(), expected_labels)

    # Generator loss from the logits.
    logits = model.generator(masked, training=False).logits.numpy().astype(np.float64)
    log_probs = logits - np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(
        -1, keepdims=True)) - logits.max(-1, keepdims=True)
    label_lp = np.take_along_axis(log_probs, masked.masked_lm_ids.numpy()[..., None], -1)[..., 0]
    mlm = -(weights * label_lp).sum() / (weights.sum() + 1e-6)
    np.testing.assert_allclose(out.mlm_loss.numpy(), mlm, rtol=1e-5)

    # Discriminator loss from its logits on the fake ids.
    enc = model.discriminator_encoder(tf.constant(fake), features["input_mask"],
                                      features["segment_ids"], training=False)
    z = model.objective.head(enc.sequence_output).numpy().astype(np.float64)
    y = expected_labels
    m = features["input_mask"].numpy()
    xent = np.maximum(z, 0) - z * y + np.log1p(np.exp(-np.abs(z)))
    disc = (xent * m).sum() / (m.sum() + 1e-6)
    np.testing.assert_allclose(out.disc_loss.numpy(), disc, rtol=1e-5)
    np.testing.assert_allclose(out.total_loss.numpy(), mlm + 50.0 * disc, rtol=1e-5)
    np.testing.assert_array_equal(out.disc_preds.numpy(), (z > 0).astype(np.int32))


def test_disallow_correct_makes_every_masked_token_a_fake():
    model = make_model(disallow_correct=True)
    masked, out = run(model, make_batch(8))
    w = masked.masked_lm_weights.numpy() > 0
    assert (out.sampled_ids.numpy()[w] != masked.masked_lm_ids.numpy()[w]).all()
    assert out.disc_labels.numpy().sum() == w.sum()


def _grads(model, features, loss_of):
    rng = rng_lib.ExampleRng(3, tf.constant(0, tf.int64), 0)
    masked = model.mask(features, rng)
    with tf.GradientTape() as tape:
        out = model(masked, training=True, rng=rng, dropout_seed=tf.constant([1, 2]))
        loss = loss_of(out)
    names = list(model.model_variables())
    grads = tape.gradient(loss, list(model.model_variables().values()))
    return {n: (None if g is None else float(tf.norm(tf.convert_to_tensor(g))))
            for n, g in zip(names, grads)}


def test_both_towers_update_the_shared_embeddings_and_no_gradient_reaches_the_generator():
    model = make_model()
    features = make_batch()
    from_gen = _grads(model, features, lambda o: o.mlm_loss)
    from_disc = _grads(model, features, lambda o: o.disc_loss)
    table = "electra/embeddings/word_embeddings"
    assert from_gen[table] > 0 and from_disc[table] > 0
    # The generator's loss does not touch the discriminator encoder or head ...
    assert not from_gen["electra/encoder/layer_0/attention/self/query/kernel"]
    assert not from_gen["discriminator_predictions/dense/kernel"]
    # ... and the discriminator's loss does not reach the generator (samples are stopped).
    assert not from_disc["generator/encoder/layer_0/attention/self/query/kernel"]
    assert not from_disc["generator_predictions/output_bias"]


def test_mlm_only_objective():
    model = make_model(electra_objective=False)
    names = set(model.model_variables())
    assert not any(n.startswith(("generator/", "discriminator_predictions/")) for n in names)
    assert model.generator.encoder is model.discriminator_encoder
    masked, out = run(model, make_batch())
    assert out.disc_probs is None and out.sampled_ids is None
    np.testing.assert_allclose(out.total_loss.numpy(), out.mlm_loss.numpy())
    assert out.disc_loss.numpy() == 0.0


def test_uniform_generator_has_no_generator_and_log_v_loss():
    model = make_model(uniform_generator=True)
    assert not any(n.startswith(("generator/", "generator_predictions/"))
                   for n in model.model_variables())
    _, out = run(model, make_batch())
    np.testing.assert_allclose(out.mlm_loss.numpy(), np.log(fx.VOCAB_SIZE), rtol=1e-5)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_low_precision_compute_gives_close_losses_with_float32_weights(dtype):
    features = make_batch()
    _, reference = run(make_model(), features, training=False)
    model = make_model(compute_dtype=dtype)
    assert all(v.dtype == tf.float32 for v in model.model_variables().values())
    _, out = run(model, features, training=False)
    assert out.total_loss.dtype == tf.float32
    np.testing.assert_allclose(out.mlm_loss.numpy(), reference.mlm_loss.numpy(), rtol=0.05)
    np.testing.assert_allclose(out.disc_loss.numpy(), reference.disc_loss.numpy(), rtol=0.05)


def test_initializers_follow_the_official_code():
    # Official: embeddings_project and discriminator_predictions/dense_1 are tf.layers.dense without
    # an initializer (Glorot-uniform); every other kernel is truncated normal, stddev 0.02.
    model = make_model(generator_hidden_size=0.25, embedding_size=32,
                       model_hparam_overrides=dict(hidden_size=128, num_hidden_layers=1,
                                                   num_attention_heads=2, intermediate_size=128,
                                                   max_position_embeddings=32))
    variables = model.model_variables()
    project = variables["electra/embeddings_project/kernel"].numpy()  # [32, 128]
    limit = np.sqrt(6.0 / (32 + 128))
    assert project.std() == pytest.approx(limit / np.sqrt(3.0), rel=0.05)
    assert np.abs(project).max() <= limit and np.abs(project).max() > 0.95 * limit
    dense_1 = variables["discriminator_predictions/dense_1/kernel"].numpy()  # [128, 1]
    limit_1 = np.sqrt(6.0 / (128 + 1))
    assert dense_1.std() == pytest.approx(limit_1 / np.sqrt(3.0), rel=0.15)
    assert np.abs(dense_1).max() <= limit_1
    # The generator (hidden 32 = embedding 32) has no projection; the encoder keeps 0.02 normal
    # (truncated at 2 stddev, so the std is about 0.88 x 0.02).
    query = variables["electra/encoder/layer_0/attention/self/query/kernel"].numpy()
    assert query.std() == pytest.approx(0.02 * 0.88, rel=0.05) and np.abs(query).max() <= 0.04
    disc_dense = variables["discriminator_predictions/dense/kernel"].numpy()
    assert disc_dense.std() == pytest.approx(0.02 * 0.88, rel=0.05)
    # Seeded as everything else: the same seed rebuilds the same values.
    np.testing.assert_array_equal(make_model(generator_hidden_size=0.25, embedding_size=32,
                                             model_hparam_overrides=dict(
                                                 hidden_size=128, num_hidden_layers=1,
                                                 num_attention_heads=2, intermediate_size=128,
                                                 max_position_embeddings=32))
                                  .model_variables()["electra/embeddings_project/kernel"].numpy(),
                                  project)


def test_generator_projection_is_glorot_uniform_too():
    # Generator hidden 16 > embedding 8: it has its own embeddings_project.
    model = make_model(embedding_size=8)
    kernel = model.model_variables()["generator/embeddings_project/kernel"].numpy()  # [8, 16]
    limit = np.sqrt(6.0 / (8 + 16))
    assert np.abs(kernel).max() <= limit and kernel.std() > 0.2  # 0.02-normal would be ~0.018
