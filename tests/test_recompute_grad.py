"""recompute_grad (layer activations recomputed in the backward pass) and gradient accumulation:
the same loss and gradients as the plain step, dropout included (a recomputed layer redraws its
forward pass's masks)."""
import numpy as np
import pytest
import tensorflow as tf

import pretrain_fixtures as fx
from configure_pretraining import PretrainingConfig
from model import modeling
from pretrain import input_pipeline, masking
from pretrain.trainer import Trainer

SPECIAL = masking.SpecialIds(pad=fx.PAD, cls=fx.CLS, sep=fx.SEP, mask=fx.MASK)


def _encoder_loss_and_grads(recompute: bool, dtype: str = "float32"):
    config = modeling.BertConfig(vocab_size=40, hidden_size=32, num_hidden_layers=2,
                                 num_attention_heads=2, intermediate_size=64,
                                 max_position_embeddings=16, embedding_size=16)
    model = modeling.BertModel(config, compute_dtype=dtype, seed=3, recompute_grad=recompute)
    ids = tf.constant([[2, 5, 6, 7, 3, 0], [2, 9, 8, 3, 11, 3]])
    mask = tf.constant([[1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 1, 1]])
    weights = tf.random.stateless_normal([2, 6, 32], seed=[4, 5])

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            out = model(ids, mask, tf.zeros_like(ids), training=True, seed=[7, 8])
            loss = tf.reduce_sum(tf.cast(out.sequence_output, tf.float32) * weights)
        return loss, tape.gradient(loss, model.trainable_variables)

    loss, grads = step()
    names = [v.name for v in model.trainable_variables]
    return float(loss), {n: tf.convert_to_tensor(g).numpy() for n, g in zip(names, grads)}


def test_recomputed_layers_give_the_same_loss_and_gradients():
    loss, grads = _encoder_loss_and_grads(False)
    loss_rc, grads_rc = _encoder_loss_and_grads(True)
    # The same computation; the recomputed layers run in their own function, where Grappler and
    # XLA (the fused elementwise blocks) may fuse (and so round) differently: equal to float32
    # rounding of sums, relative to the largest term of the tensor (an embedding gradient
    # element of -0.3097 next to elements of 115 differed by 2e-5).
    assert loss_rc == pytest.approx(loss, rel=1e-6)
    assert grads.keys() == grads_rc.keys() and len(grads) > 10
    for name, grad in grads.items():
        np.testing.assert_allclose(grads_rc[name], grad, rtol=1e-5,
                                   atol=1e-6 * max(1.0, np.abs(grad).max()), err_msg=name)
        assert np.abs(grad).max() > 0, name


def test_recompute_in_bfloat16_agrees_within_bfloat16_precision():
    # oneDNN may pick other bfloat16 kernels inside the recomputed function: equal up to rounding.
    loss, grads = _encoder_loss_and_grads(False, "bfloat16")
    loss_rc, grads_rc = _encoder_loss_and_grads(True, "bfloat16")
    assert loss_rc == pytest.approx(loss, rel=5e-2)
    for name, grad in grads.items():
        if "key/bias" in name:
            continue  # exactly 0 in exact arithmetic (softmax ignores a shift per query): noise
        error = np.linalg.norm(grads_rc[name] - grad) / (np.linalg.norm(grad) + 1e-12)
        assert error < 5e-2, (name, error)


def _two_steps(data_dir, **overrides):
    hparams = fx.tiny_hparams(**overrides)
    config = PretrainingConfig.from_hparams("m", str(data_dir), hparams)
    trainer = Trainer(config, SPECIAL)
    files = input_pipeline.find_files(config.pretrain_tfrecords)
    result = trainer.train_steps(trainer.train_iterator(files.train), 2)
    assert result.finite and result.steps_applied == 2
    return result.metrics, {k: v.numpy() for k, v in trainer.model_vars.items()}


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    return fx.write_data(str(tmp_path_factory.mktemp("data")))


def test_accumulation_with_recompute_matches_the_plain_full_batch_step(data_dir):
    # The whole trainer path: recomputed layers inside gradient-accumulation micro-batches.
    # Micro-batches draw their own dropout masks, so dropout is off here (the encoder test above
    # covers recomputation with dropout).
    overrides = dict(model_hparam_overrides=fx.tiny_hparams()["model_hparam_overrides"]
                     | dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))
    full, full_weights = _two_steps(data_dir, **overrides)
    both, both_weights = _two_steps(data_dir, gradient_accumulation_steps=2, recompute_grad=True,
                                    **overrides)
    assert both["loss"] == pytest.approx(full["loss"], rel=1e-5)
    assert both["global_norm"] == pytest.approx(full["global_norm"], rel=1e-4)
    for name, value in full_weights.items():
        np.testing.assert_allclose(both_weights[name], value, atol=1e-5, err_msg=name)


def test_electric_trains_with_recompute_and_reports_discriminator_metrics(data_dir):
    # Electric's directional towers share BertModel's forward pass, so recompute_grad reaches
    # them too; the loop reports the noise-contrastive discriminator's loss and accuracy.
    overrides = dict(electric_objective=True, two_tower_generator=True, electra_objective=False,
                     model_hparam_overrides=fx.tiny_hparams()["model_hparam_overrides"]
                     | dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))
    plain, plain_weights = _two_steps(data_dir, **overrides)
    recomputed, recomputed_weights = _two_steps(data_dir, recompute_grad=True, **overrides)
    trainer = Trainer(PretrainingConfig.from_hparams(
        "m", str(data_dir), fx.tiny_hparams(recompute_grad=True, **overrides)), SPECIAL)
    towers = trainer.model.generator.towers
    assert towers.ltr.recompute_grad and towers.rtl.recompute_grad
    assert {"disc_loss", "disc_accuracy"} <= set(plain)
    assert np.isfinite(plain["disc_loss"]) and 0.0 < plain["disc_accuracy"] <= 1.0
    assert recomputed["loss"] == pytest.approx(plain["loss"], rel=1e-5)
    assert any(name.startswith("generator_ltr/") for name in plain_weights)
    for name, value in plain_weights.items():
        np.testing.assert_allclose(recomputed_weights[name], value, atol=1e-5, err_msg=name)
