"""Building blocks for task heads: the `TaskHead` interface and a dense layer initialised as TF1's.

Every head is a tf.Module whose variables live under `task_specific/<task_name>/`, as in the
official release (its FinetuningModel opens `tf.variable_scope("task_specific/" + task.name)`
around each task's prediction module). The layer-wise learning-rate map and checkpoints rely on
that prefix.

The official heads call `tf.layers.dense` without an initializer, i.e. Glorot-uniform kernels
and zero biases; `head_dense` reproduces that (the encoder's Dense uses truncated normal 0.02).
"""
import abc
from typing import Any

import tensorflow as tf

from model import layers
from model import modeling

HEAD_SCOPE = "task_specific"


def head_scope(task_name: str) -> str:
    """"task_specific/<task_name>": the variable-name prefix of a task's head."""
    return f"{HEAD_SCOPE}/{task_name}"


def head_dense(in_dim: int, out_dim: int, name: str, activation: str | None = None,
               seed: int = 0) -> layers.Dense:
    """A head's dense layer, `<name>/kernel` (Glorot-uniform, as TF1's `tf.layers.dense`) and
    `<name>/bias` (zeros). The initial kernel does not depend on the task's name (the seed name
    leaves it out): a task defined by data draws what the built-in task of the same data does."""
    scope, _, rest = name.partition("/")
    seed_name = f"{scope}/{rest.partition('/')[2]}" if scope == HEAD_SCOPE else None
    return layers.Dense(in_dim, out_dim, name, activation, seed=seed, init="glorot_uniform",
                        seed_name=seed_name)


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
        self.dense = head_dense(bert_config.hidden_size, num_labels, f"{self.scope}/dense",
                               seed=seed)
