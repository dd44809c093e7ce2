"""What every objective piece reads and returns: the step's tensors and the output."""
from typing import NamedTuple

import tensorflow as tf

from model import layers
from pretrain import masking


class Denominators(NamedTuple):
    """Global (all replicas, all micro-batches) loss denominators of one step."""
    mlm: tf.Tensor  # float32 scalar: sum of masked_lm_weights
    disc: tf.Tensor  # float32 scalar: sum of input_mask


class MaskedLM(NamedTuple):
    """The generator as a masked LM at the masked positions (reported for every objective)."""
    example_loss: tf.Tensor  # float32 [B, N]: -log p(original)
    loss_sum: tf.Tensor  # sum of weights * example_loss
    loss: tf.Tensor  # loss_sum / (denominator + 1e-6)
    preds: tf.Tensor  # int32 [B, N]: argmax


def masked_lm(logits: tf.Tensor, masked: masking.MaskedInputs,
              denominators: Denominators) -> MaskedLM:
    """The official masked-LM loss: sum(w * -log p(original)) / (sum(w) + 1e-6)."""
    example_loss = layers.sparse_softmax_cross_entropy(logits, masked.masked_lm_ids)
    loss_sum = tf.reduce_sum(masked.masked_lm_weights * example_loss)
    return MaskedLM(example_loss, loss_sum, loss_sum / (denominators.mlm + 1e-6),
                    tf.argmax(logits, -1, output_type=tf.int32))


class Corrupted(NamedTuple):
    """The discriminator's input: originals with the generator's samples written in."""
    original_ids: tf.Tensor  # int32 [B, L]
    fake_ids: tf.Tensor  # int32 [B, L]
    updated: tf.Tensor  # int32 [B, L]: 1 where a sample was written
    labels: tf.Tensor  # int32 [B, L]: 1 where the token counts as replaced


class Step(NamedTuple):
    """What the ELECTRA step computed before the objective (None where it did not get there)."""
    masked: masking.MaskedInputs
    denominators: Denominators
    generated: "GeneratorOutput"  # noqa: F821 -- pretrain.generators.GeneratorOutput
    mlm: MaskedLM
    sampled: tf.Tensor | None = None  # int32 [B, N]
    corrupted: Corrupted | None = None
    sequence_output: tf.Tensor | None = None  # the discriminator encoder's, on fake_ids


class PretrainingOutput(NamedTuple):
    total_loss: tf.Tensor  # float32 scalar (official formula over this batch)
    mlm_loss: tf.Tensor
    disc_loss: tf.Tensor  # 0 where there is no discriminator loss
    mlm_loss_sum: tf.Tensor  # numerators and denominators, for exact cross-replica losses
    mlm_weight_sum: tf.Tensor
    disc_loss_sum: tf.Tensor
    disc_weight_sum: tf.Tensor
    masked_lm_ids: tf.Tensor  # int32 [B, N]
    masked_lm_weights: tf.Tensor  # float32 [B, N]
    masked_lm_preds: tf.Tensor  # int32 [B, N]: the reported masked LM's argmax
    masked_lm_example_loss: tf.Tensor  # float32 [B, N]: -log p(original) per position
    input_mask: tf.Tensor  # int32 [B, L]
    sampled_ids: tf.Tensor | None = None  # int32 [B, N]: the generator's samples
    disc_probs: tf.Tensor | None = None  # float32 [B, L]
    disc_preds: tf.Tensor | None = None  # int32 [B, L]
    disc_labels: tf.Tensor | None = None  # int32 [B, L]: 1 where the token was replaced
    disc_example_loss: tf.Tensor | None = None  # float32 [B]
