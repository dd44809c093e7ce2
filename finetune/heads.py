"""Building blocks for task heads: the `TaskHead` interface and a dense layer initialised as TF1's.

Every head is a tf.Module whose variables live under `task_specific/<task_name>/`, as in the
official release (its FinetuningModel opens `tf.variable_scope("task_specific/" + task.name)`
around each task's prediction module). The layer-wise learning-rate map and checkpoints rely on
that prefix.

The official heads call `tf.layers.dense` without an initializer, i.e. Glorot-uniform kernels
and zero biases; `HeadDense` reproduces that (the encoder's Dense uses truncated normal 0.02).
"""
import abc
import math
import zlib
from typing import Any

import tensorflow as tf

from model import layers
from model import modeling

HEAD_SCOPE = "task_specific"


def head_scope(task_name: str) -> str:
    """"task_specific/<task_name>": the variable-name prefix of a task's head."""
    return f"{HEAD_SCOPE}/{task_name}"


def glorot_uniform_variable(name: str, shape: list[int], seed: int = 0) -> tf.Variable:
    """A float32 variable with TF1's default `glorot_uniform` init, deterministic in (seed, name)."""
    fan_in, fan_out = (shape[0], shape[-1]) if len(shape) > 1 else (shape[0], shape[0])
    limit = math.sqrt(6.0 / (fan_in + fan_out))
    name_seed = zlib.crc32(name.encode("utf-8")) & 0x7FFFFFFF
    value = tf.random.stateless_uniform(shape, seed=[seed, name_seed], minval=-limit, maxval=limit,
                                        dtype=tf.float32)
    # Same aggregation as model/layers.create_variable: assignable in replica context.
    return tf.Variable(value, name=name, aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)


class HeadDense(tf.Module):
    """y = activation(x @ kernel + bias), kernel [in, out] named `<name>/kernel`, `<name>/bias`."""

    def __init__(self, in_dim: int, out_dim: int, name: str, activation: str | None = None,
                 seed: int = 0):
        super().__init__(name=name.replace("/", "_"))
        self.kernel = glorot_uniform_variable(f"{name}/kernel", [in_dim, out_dim], seed)
        self.bias = layers.create_variable(f"{name}/bias", [out_dim], "zeros")
        self.activation = layers.get_activation(activation)

    def __call__(self, x: tf.Tensor) -> tf.Tensor:
        """x: float32 [..., in] -> [..., out]."""
        kernel = tf.cast(self.kernel, x.dtype)
        y = tf.matmul(x, kernel) if x.shape.rank == 2 else tf.tensordot(x, kernel, axes=1)
        y = tf.nn.bias_add(y, tf.cast(self.bias, x.dtype))
        return self.activation(y) if self.activation is not None else y


class TaskHead(tf.Module, abc.ABC):
    """A task's prediction module on top of the shared encoder.

    Subclasses create all their variables in the constructor (names under `self.scope`) and
    implement `__call__`, which computes only.
    """

    def __init__(self, task_name: str, bert_config: modeling.BertConfig, seed: int = 0):
        super().__init__(name=f"{HEAD_SCOPE}_{task_name}")
        self.task_name = task_name
        self.scope = head_scope(task_name)
        self.bert_config = bert_config
        self.seed = seed

    @abc.abstractmethod
    def __call__(self, encoder_output: modeling.EncoderOutput, features: dict[str, tf.Tensor], *,
                 training: bool, seeds: layers.SeedStream | None,
                 percent_done: tf.Tensor) -> tuple[tf.Tensor, dict[str, Any]]:
        """Per-example losses and outputs for a batch.

        Args:
          encoder_output: the encoder's outputs (sequence_output [B, L, H], pooled_output [B, H]).
          features: the batch, every feature of every task (int32 / float32 [B, ...]).
          training: dropout on.
          seeds: stateless seeds for dropout (None when not training).
          percent_done: float32 scalar, fraction of training done (for schedules inside heads).

        Returns:
          losses: float32 [B], this task's loss per row (rows of other tasks are masked by the
            caller, so any finite value is fine there).
          outputs: dict name -> tensor [B, ...]; the evaluation loop hands each row's values to
            the task's scorer and test-output writer. Include "loss" and "eid".
        """


class LinearTaskHead(TaskHead):
    """A TaskHead whose prediction layer is one dense layer `<scope>/dense`: hidden -> num_labels."""

    def __init__(self, task_name: str, bert_config: modeling.BertConfig, num_labels: int,
                 seed: int = 0):
        super().__init__(task_name, bert_config, seed)
        self.num_labels = num_labels
        self.dense = HeadDense(bert_config.hidden_size, num_labels, f"{self.scope}/dense",
                               seed=seed)
