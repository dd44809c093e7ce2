"""Feature specs: the one definition of every model input, used to write and to parse tfrecords.

Each task declares its own features (named `<task>_...`, e.g. `sst_label_ids`) on top of the shared
ones below. A featurized example may leave a feature out; it is then written with the spec's
default value (zeros), which is what rows of other tasks and padding rows carry in a multi-task
batch.
"""
import dataclasses
import math
from typing import Callable, Sequence

import numpy as np
import tensorflow as tf


@dataclasses.dataclass
class FeatureSpec:
    """A fixed-shape int64 (stored) / int32 (parsed) or float32 feature."""
    name: str
    shape: Sequence[int]
    is_int_feature: bool = True
    default_value_fn: Callable[[Sequence[int]], np.ndarray] | None = None

    def parsing_spec(self) -> tf.io.FixedLenFeature:
        return tf.io.FixedLenFeature(list(self.shape),
                                     tf.int64 if self.is_int_feature else tf.float32)

    def default_values(self) -> np.ndarray:
        if self.default_value_fn is not None:
            return np.asarray(self.default_value_fn(self.shape))
        return np.zeros(self.shape, np.int64 if self.is_int_feature else np.float32)

    def to_feature(self, values) -> tf.train.Feature:
        """`values` (scalar or array of this spec's shape) -> a tf.train.Feature.

        Raises:
          ValueError: the number of values does not match the shape.
        """
        flat = np.asarray(values).reshape(-1)
        expected = math.prod(self.shape)  # 1 for a scalar
        if flat.size != expected:
            raise ValueError(f"feature {self.name!r} expects shape {list(self.shape)} "
                             f"({expected} values), got {flat.size} values")
        # As Python numbers: the protobuf lists take them several times faster than numpy's
        # scalars, and store the same values (float32 values stay exact as Python floats).
        if self.is_int_feature:
            return tf.train.Feature(int64_list=tf.train.Int64List(
                value=flat.astype(np.int64).tolist()))
        return tf.train.Feature(float_list=tf.train.FloatList(
            value=flat.astype(np.float32).tolist()))


def get_shared_feature_specs(max_seq_length: int) -> list[FeatureSpec]:
    """Inputs every task provides: the encoder inputs and which task a row belongs to.

    `task_id` is the index of the task in `task_names`; `len(task_names)` marks a padding row.
    """
    return [
        FeatureSpec("input_ids", [max_seq_length]),
        FeatureSpec("input_mask", [max_seq_length]),
        FeatureSpec("segment_ids", [max_seq_length]),
        FeatureSpec("task_id", []),
    ]
