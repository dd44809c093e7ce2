"""The encoder's per-token work on real tokens only (padding removed between the attentions).

Every op of a Transformer layer but the attention itself works token by token: the query, key,
value and output projections, the FFN, dropout, residuals and LayerNorm. On a padded batch
[B, L] they also compute on padding, which nothing reads (attention masks it, losses weight it
0): on SST-2, 13 real tokens per sentence in batches padded to 48 (buckets of 16), about three
quarters of the work. Packed, those ops see [T, H], the batch's T real tokens in order; only the
attention moves its queries, keys and values to [B, N, L, d] (one gather each, which also does
the split into heads) and gathers the context back. Each real token's numbers are those of the
padded layout up to float rounding (padding keys carry attention probability exactly 0 in
float32 either way).

T is rounded up to a multiple of ROWS_MULTIPLE with filler rows (zeros in, dropped out; their
gradient is 0), so the compiled elementwise blocks see a few row counts rather than one per
batch. Shapes depend on the data, so XLA-compiled steps (static shapes) keep the padded layout.

Every move is a permutation of rows plus zeros, so its gradient is the opposite move (a gather,
not the scatter-add TensorFlow's gather gradient would run).
"""
from typing import NamedTuple

import tensorflow as tf

# Packed row counts are multiples of this: the elementwise blocks compile once per row count.
ROWS_MULTIPLE = 64


class Packing(NamedTuple):
    """Row maps between the padded layout and the packed one. Each reads rows of its source with
    one zero row appended: an index equal to the source's row count reads zeros."""
    rows: tf.Tensor  # [T]: flat position (b * L + l) of each packed row (B*L: filler)
    positions: tf.Tensor  # [B*L]: packed row of each flat position (T: padding)
    to_heads: tf.Tensor  # [B*N*L]: row of [T*N, d] for each (b, head, l) (T*N: padding)
    from_heads: tf.Tensor  # [T*N]: row of [B*N*L, d] for each (t, head) (B*N*L: filler)
    batch_size: tf.Tensor
    seq_len: tf.Tensor
    num_heads: int


def plan(input_mask: tf.Tensor, num_heads: int, multiple: int = ROWS_MULTIPLE) -> Packing:
    """The packing of a batch's real tokens (input_mask 1), in batch order."""
    batch_size, seq_len = tf.shape(input_mask)[0], tf.shape(input_mask)[1]
    real = tf.reshape(tf.cast(input_mask, tf.bool), [-1])
    n_positions = batch_size * seq_len
    rows = tf.cast(tf.where(real)[:, 0], tf.int32)
    n_real = tf.size(rows, out_type=tf.int32)
    n_rows = tf.maximum((n_real + multiple - 1) // multiple, 1) * multiple
    rows = tf.concat([rows, tf.fill([n_rows - n_real], n_positions)], 0)
    positions = tf.where(real, tf.cumsum(tf.cast(real, tf.int32), exclusive=True), n_rows)

    heads = tf.range(num_heads, dtype=tf.int32)
    at = tf.reshape(positions, [batch_size, 1, seq_len])
    to_heads = tf.where(at < n_rows, at * num_heads + heads[:, tf.newaxis], n_rows * num_heads)
    source = rows[:, tf.newaxis]
    from_heads = tf.where(
        source < n_positions,
        (source // seq_len * num_heads + heads) * seq_len + source % seq_len,
        n_positions * num_heads)
    return Packing(rows, positions, tf.reshape(to_heads, [-1]), tf.reshape(from_heads, [-1]),
                   batch_size, seq_len, num_heads)


def _move(x: tf.Tensor, index: tf.Tensor, opposite: tf.Tensor) -> tf.Tensor:
    """Rows `index` of x with a zero row appended; the gradient moves back along `opposite`."""
    @tf.custom_gradient
    def move(x):
        def gradient(dy):
            return _gather_padded(tf.convert_to_tensor(dy), opposite)
        return _gather_padded(x, index), gradient
    return move(x)


def _gather_padded(x: tf.Tensor, index: tf.Tensor) -> tf.Tensor:
    return tf.gather(tf.pad(x, [[0, 1], [0, 0]]), index)


def pack(x: tf.Tensor, packing: Packing) -> tf.Tensor:
    """[B*L, D] -> [T, D]: the real tokens' rows, then zero filler rows."""
    return _move(x, packing.rows, packing.positions)


def unpack(x: tf.Tensor, packing: Packing) -> tf.Tensor:
    """[T, D] -> [B*L, D]: each token's row back at its position, zeros at padding."""
    return _move(x, packing.positions, packing.rows)


def to_heads(x: tf.Tensor, packing: Packing) -> tf.Tensor:
    """[T, N*d] -> [B, N, L, d] (the attention's layout), zeros at padding."""
    n = packing.num_heads
    d = x.shape[-1] // n
    moved = _move(tf.reshape(x, [-1, d]), packing.to_heads, packing.from_heads)
    return tf.reshape(moved, [packing.batch_size, n, packing.seq_len, d])


def from_heads(x: tf.Tensor, packing: Packing) -> tf.Tensor:
    """[B, N, L, d] -> [T, N*d]: the real tokens' rows, heads side by side."""
    d = x.shape[-1]
    moved = _move(tf.reshape(x, [-1, d]), packing.from_heads, packing.to_heads)
    return tf.reshape(moved, [-1, packing.num_heads * d])
