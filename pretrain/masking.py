"""Dynamic masking, gathers and scatters for pre-training (the official pretrain_helpers).

The generator only predicts the few masked positions, so the model works on [B, N] position
lists (N = max_predictions_per_seq) rather than on full [B, L] sequences: `gather_positions`
pulls the vectors out, `scatter_update` writes tokens back. The special token ids come in as
arguments; nothing here reads a vocabulary.
"""
from typing import Mapping, NamedTuple

import tensorflow as tf

from model import layers
from pretrain import rng as rng_lib

# Share of the chosen positions that become [MASK]; the others keep their token. As the official
# code (and unlike BERT) there is no random-token branch: the generator provides the replacements.
MASK_FRACTION = 0.85
_NOT_CANDIDATE = -1e9  # score of positions that may not be masked (finite: XLA-friendly)


class SpecialIds(NamedTuple):
    pad: int
    cls: int
    sep: int
    mask: int

    @classmethod
    def from_vocab(cls, vocab: Mapping[str, int], where: str = "vocab") -> "SpecialIds":
        """Ids of [PAD], [CLS], [SEP], [MASK] from a token -> id mapping."""
        tokens = {"pad": "[PAD]", "cls": "[CLS]", "sep": "[SEP]", "mask": "[MASK]"}
        missing = [t for t in tokens.values() if t not in vocab]
        if missing:
            raise ValueError(f"{where} lacks the special tokens {missing} that pre-training needs")
        return cls(**{key: int(vocab[token]) for key, token in tokens.items()})


class MaskedInputs(NamedTuple):
    input_ids: tf.Tensor  # int32 [B, L], with [MASK] at 85% of the chosen positions
    input_mask: tf.Tensor  # int32 [B, L]
    segment_ids: tf.Tensor  # int32 [B, L]
    masked_lm_positions: tf.Tensor  # int32 [B, N]; 0 where the weight is 0
    masked_lm_ids: tf.Tensor  # int32 [B, N]: original tokens; 0 where the weight is 0
    masked_lm_weights: tf.Tensor  # float32 [B, N]: 1 for real predictions, 0 for padding


def gather_positions(sequence: tf.Tensor, positions: tf.Tensor) -> tf.Tensor:
    """sequence [B, L] or [B, L, D], positions int32 [B, N] -> [B, N] or [B, N, D]."""
    return tf.gather(sequence, positions, batch_dims=1)


def scatter_update(sequence: tf.Tensor, updates: tf.Tensor, positions: tf.Tensor):
    """Writes `updates` [B, N(, D)] into `sequence` [B, L(, D)] at `positions` [B, N].

    Official semantics: updates aimed at position 0 are ignored (0 pads position lists, and
    position 0 holds [CLS]); a position named twice gets the mean of its updates (floats) or their
    floor-divided sum (ints). Returns (updated sequence, int32 [B, L] mask of updated positions).
    """
    has_depth = sequence.shape.rank == 3
    if not has_depth:
        sequence = sequence[..., tf.newaxis]
        updates = updates[..., tf.newaxis]
    shape = tf.shape(sequence)
    batch, length, depth = shape[0], shape[1], shape[2]
    flat_positions = tf.reshape(positions + length * tf.range(batch)[:, tf.newaxis], [-1, 1])
    scattered = tf.scatter_nd(flat_positions, tf.reshape(updates, [-1, depth]),
                              [batch * length, depth])
    counts = tf.scatter_nd(flat_positions, tf.ones([tf.size(positions)], tf.int32),
                           [batch * length])
    counts = tf.reshape(counts, [batch, length])
    counts *= tf.concat([tf.zeros([batch, 1], tf.int32), tf.ones([batch, length - 1], tf.int32)],
                        axis=1)
    scattered = tf.reshape(scattered, [batch, length, depth])
    counts_3d = counts[..., tf.newaxis]
    if sequence.dtype.is_floating:
        scattered /= tf.maximum(1.0, tf.cast(counts_3d, sequence.dtype))
    else:
        scattered = tf.math.floordiv(scattered, tf.maximum(1, tf.cast(counts_3d, scattered.dtype)))
    updated_mask = tf.minimum(counts, 1)
    result = tf.where(tf.cast(updated_mask, tf.bool)[..., tf.newaxis], scattered, sequence)
    if not has_depth:
        result = tf.squeeze(result, -1)
    return result, updated_mask


def candidates_mask(input_ids: tf.Tensor, input_mask: tf.Tensor,
                    special_ids: SpecialIds) -> tf.Tensor:
    """bool [B, L]: positions that may be masked (real tokens other than [CLS]/[SEP]/[MASK]/[PAD])."""
    allowed = tf.cast(input_mask, tf.bool)
    for token_id in (special_ids.sep, special_ids.cls, special_ids.mask, special_ids.pad):
        allowed &= tf.not_equal(input_ids, token_id)
    return allowed


def num_to_predict(input_mask: tf.Tensor, mask_prob: float, max_predictions_per_seq: int):
    """int32 [B]: round(mask_prob * tokens), at least 1, at most N (tokens count [CLS]/[SEP])."""
    num_tokens = tf.cast(tf.reduce_sum(input_mask, -1), tf.float32)
    return tf.maximum(1, tf.minimum(max_predictions_per_seq,
                                    tf.cast(tf.round(num_tokens * mask_prob), tf.int32)))


def mask(input_ids: tf.Tensor, input_mask: tf.Tensor, segment_ids: tf.Tensor, *,
         mask_prob: float, max_predictions_per_seq: int, special_ids: SpecialIds,
         rng: rng_lib.ExampleRng) -> MaskedInputs:
    """Dynamic masking (the official `mask()`), redrawn at every step.

    Per example, k = num_to_predict() positions are chosen among the candidates, uniformly and
    WITHOUT replacement: the top-k of Gumbel-perturbed log-weights (all candidate weights equal)
    is a uniform sample without replacement. The official code draws with tf.random.categorical,
    which can pick the same position twice (it then counts twice in the loss, and the scatter
    averages the duplicate). An example with fewer than k candidates masks all it has. 85% of the
    chosen positions become [MASK]; the rest keep their token.

    input_ids, input_mask, segment_ids: int32 [B, L] -> MaskedInputs with [B, N] position lists.
    """
    n = max_predictions_per_seq
    length = input_ids.shape[1]
    if length is not None and n > length:
        raise ValueError(f"max_predictions_per_seq ({n}) exceeds the sequence length ({length})")
    shape = tf.shape(input_ids)
    candidates = candidates_mask(input_ids, input_mask, special_ids)
    noise = rng.uniform([shape[0], shape[1]], rng_lib.MASK_POSITIONS)
    gumbel = -tf.math.log(-tf.math.log(noise + 1e-9) + 1e-9)
    scores = tf.where(candidates, gumbel, _NOT_CANDIDATE)
    top_scores, positions = tf.math.top_k(scores, k=n, sorted=True)
    weights = tf.sequence_mask(num_to_predict(input_mask, mask_prob, n), n, dtype=tf.float32)
    weights *= tf.cast(top_scores > _NOT_CANDIDATE / 2, tf.float32)
    positions = positions * tf.cast(weights, tf.int32)
    masked_lm_ids = gather_positions(input_ids, positions) * tf.cast(weights, tf.int32)

    replace = rng.uniform([shape[0], n], rng_lib.MASK_REPLACE) < MASK_FRACTION
    replace_positions = positions * tf.cast(replace, tf.int32)  # position 0 = no-op
    masked_ids, _ = scatter_update(input_ids, tf.fill(tf.shape(positions), special_ids.mask),
                                   replace_positions)
    return MaskedInputs(tf.stop_gradient(masked_ids), input_mask, segment_ids, positions,
                        masked_lm_ids, weights)


def unmask(inputs: MaskedInputs) -> tf.Tensor:
    """int32 [B, L]: the original ids (the chosen positions restored)."""
    ids, _ = scatter_update(inputs.input_ids, inputs.masked_lm_ids, inputs.masked_lm_positions)
    return ids


def sample_from_softmax(logits: tf.Tensor, uniform_noise: tf.Tensor,
                        disallow: tf.Tensor | None = None, temperature: float = 1.0) -> tf.Tensor:
    """Gumbel-max sampling: int32 ids [..., ] from logits [..., V] / temperature.

    `uniform_noise` has the shape of `logits`: float uniforms u in [0, 1), or uint32 random bits
    (ExampleRng.bits), turned into the same u (rng.unit_floats) inside the fused block. The noise
    is the official -log(-log(u + 1e-9) + 1e-9). `disallow` (0/1 [..., V]) takes 1000 off those
    logits, as the official code does.
    """
    return tf.argmax(_gumbel_perturbed(logits, uniform_noise, disallow, temperature), axis=-1,
                     output_type=tf.int32)


# One pass over [B, N, V] instead of nine (with the bits' conversion to floats); the argmax
# stays in the graph, where TensorFlow's kernel ran 4.5x faster than XLA's reduction
# (BENCHMARKS.md, "Tried and not kept").
@layers.elementwise_block
def _gumbel_perturbed(logits, uniform_noise, disallow, temperature: float):
    if uniform_noise.dtype == tf.uint32:
        uniform_noise = rng_lib.unit_floats(uniform_noise)
    logits = tf.cast(logits, tf.float32) / temperature
    if disallow is not None:
        logits -= 1000.0 * tf.cast(disallow, tf.float32)
    gumbel = -tf.math.log(-tf.math.log(uniform_noise + 1e-9) + 1e-9)
    return logits + gumbel
