"""The encoder's per-token work on real tokens only (padding removed between the attentions).

Every op of a Transformer layer but the attention itself works token by token: the query, key,
value and output projections, the FFN, dropout, residuals and LayerNorm. On a padded batch
[B, L] they also compute on padding, which nothing reads (attention masks it, losses weight it
0): on SST-2, 13 real tokens per sentence in batches padded to 48 (buckets of 16), about three
quarters of the work. Packed, those ops see [T, H], the batch's T real tokens in order;
only the attention scatters its queries, keys and values back to [B, L] and gathers the
context again. Each real token's numbers are those of the padded layout up to float rounding
(padding keys carry attention probability exactly 0 in float32 either way).

T is rounded up to a multiple of ROWS_MULTIPLE with filler rows (zeros in, dropped out; their
gradient is 0), so the compiled elementwise blocks see a few row counts rather than one per
batch. Shapes depend on the data, so XLA-compiled steps (static shapes) keep the padded layout.
"""
from typing import NamedTuple

import tensorflow as tf

# Packed row counts are multiples of this: the elementwise blocks compile once per row count.
ROWS_MULTIPLE = 64


class Packing(NamedTuple):
    """Where each packed row comes from and where each padded position goes."""
    rows: tf.Tensor  # int32 [T]: the flat position (b * L + l) of each packed row; B*L = filler
    positions: tf.Tensor  # int32 [B*L]: the packed row of each flat position; T = padding


def plan(input_mask: tf.Tensor, multiple: int = ROWS_MULTIPLE) -> Packing:
    """The packing of a batch's real tokens (input_mask 1), in batch order."""
    real = tf.reshape(tf.cast(input_mask, tf.bool), [-1])
    n_positions = tf.size(real, out_type=tf.int32)
    rows = tf.cast(tf.where(real)[:, 0], tf.int32)
    n_real = tf.size(rows, out_type=tf.int32)
    n_rows = tf.maximum((n_real + multiple - 1) // multiple, 1) * multiple
    rows = tf.concat([rows, tf.fill([n_rows - n_real], n_positions)], 0)
    rank = tf.cumsum(tf.cast(real, tf.int32), exclusive=True)
    return Packing(rows, tf.where(real, rank, n_rows))


def _with_zero_row(x: tf.Tensor) -> tf.Tensor:
    return tf.pad(x, [[0, 1], [0, 0]])


def pack(x: tf.Tensor, packing: Packing) -> tf.Tensor:
    """[B*L, D] -> [T, D]: the real tokens' rows, then zero filler rows."""
    return tf.gather(_with_zero_row(x), packing.rows)


def unpack(x: tf.Tensor, packing: Packing) -> tf.Tensor:
    """[T, D] -> [B*L, D]: each token's row back at its position, zeros at padding."""
    return tf.gather(_with_zero_row(x), packing.positions)
