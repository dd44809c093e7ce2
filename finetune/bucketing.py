"""Length buckets: each batch padded to the shortest of a few fixed lengths that holds its longest
example, instead of to max_seq_length.

The feature cache keeps every row at max_seq_length; a batch is cut afterwards to
`bucket_length`: the longest row rounded up to a multiple of `pad_to_multiple_of` (at least the
model's `minimum`, at most max_seq_length). Only the encoder inputs are cut (SEQUENCE_FEATURES):
the other features (labels, a tagging task's word slots) are not positions in the sequence. Which
rows make a batch and in what order stays as with full padding, so training order, resuming and
evaluation outputs are unchanged; padded positions are masked out of attention, so the outputs
of the real tokens equal full padding's up to float rounding (dropout masks, being drawn for the
batch's shape, differ in training).

A step therefore sees at most max_seq_length / pad_to_multiple_of shapes: outside XLA one trace
with a sequence dimension of None runs them all; XLA compiles once per bucket.
"""
from typing import Mapping

import numpy as np
import tensorflow as tf

SEQUENCE_FEATURES = ("input_ids", "input_mask", "segment_ids")


def bucket_lengths(max_seq_length: int, multiple: int, minimum: int = 0) -> list[int]:
    """Every length a batch can be cut to (0 = off: max_seq_length only)."""
    if multiple <= 0:
        return [max_seq_length]
    lengths = {min(max_seq_length, max(minimum, m))
               for m in range(multiple, max_seq_length + multiple, multiple)}
    return sorted(lengths)


def _round_up(longest, max_seq_length: int, multiple: int, minimum: int):
    """Works on numpy ints and int32 tensors alike."""
    rounded = (longest + multiple - 1) // multiple * multiple
    if isinstance(longest, tf.Tensor):
        return tf.minimum(tf.maximum(rounded, minimum), max_seq_length)
    return int(min(max(rounded, minimum), max_seq_length))


class Trimmer:
    """Cuts batches of a model's features to their bucket length (see the module docstring).

    multiple: the bucket width (hparam pad_to_multiple_of), 0 = keep max_seq_length.
    minimum: the shortest length the model's heads accept (a QA head's beam of top positions).
    """

    def __init__(self, max_seq_length: int, multiple: int, minimum: int = 0):
        self.max_seq_length = max_seq_length
        self.multiple = multiple
        self.minimum = min(minimum, max_seq_length)

    @property
    def enabled(self) -> bool:
        return 0 < self.multiple

    def lengths(self) -> list[int]:
        return bucket_lengths(self.max_seq_length, self.multiple, self.minimum)

    def bucket_length(self, input_mask):
        """The bucket of a batch: its longest row (last real token + 1) rounded up."""
        if isinstance(input_mask, tf.Tensor):
            positions = tf.range(1, tf.shape(input_mask)[1] + 1)
            longest = tf.reduce_max(tf.cast(input_mask != 0, tf.int32) * positions)
        else:
            mask = np.asarray(input_mask) != 0
            longest = int((mask * np.arange(1, mask.shape[1] + 1)).max(initial=0))
        return _round_up(longest, self.max_seq_length, self.multiple, self.minimum)

    def __call__(self, batch: Mapping) -> dict:
        """The batch (name -> [B, ...], tensors or arrays) with its encoder inputs cut."""
        if not self.enabled:
            return dict(batch)
        length = self.bucket_length(batch["input_mask"])
        return {name: value[:, :length] if name in SEQUENCE_FEATURES else value
                for name, value in batch.items()}


def relaxed_signature(element_spec):
    """A batch spec whose batch and sequence dimensions are None, so one trace of a function
    serves every bucket and batch size; None when `element_spec` is not a dict of TensorSpecs
    (e.g. per-replica values: the caller then lets tf.function relax shapes itself)."""
    if not isinstance(element_spec, Mapping) or not all(
            isinstance(s, tf.TensorSpec) for s in element_spec.values()):
        return None
    relaxed = {}
    for name, spec in element_spec.items():
        shape = spec.shape.as_list()
        if shape:
            shape[0] = None
        if name in SEQUENCE_FEATURES:
            shape[1] = None
        relaxed[name] = tf.TensorSpec(shape, spec.dtype, name=name)
    return relaxed

