"""The fine-tuning network: the shared ELECTRA encoder plus one head per task.

Variable names: the encoder's are `electra/...` (the discriminator's names in pre-training and in
the official release, so both checkpoints initialise it), each head's `task_specific/<task>/...`.
"""
import logging
from typing import Sequence

import tensorflow as tf

import configure_finetuning
from finetune import task as task_lib
from model import embedding_sharing
from model import layers
from model import modeling
from util import checkpoint
from util import distribution, stateless_random

log = logging.getLogger(__name__)


class FinetuningModel(tf.Module):
    """Encoder + task heads; the loss of each row comes from the head of its `task_id`."""

    def __init__(self, config: configure_finetuning.FinetuningConfig,
                 tasks: Sequence[task_lib.Task], seed: int = 0,
                 bert_config: modeling.BertConfig | None = None,
                 remove_padding: bool | None = None):
        """`remove_padding`: None follows the config (hparam remove_padding, off under XLA)."""
        super().__init__(name="finetuning_model")
        self.bert_config = bert_config or config.bert_config()
        if config.max_seq_length > self.bert_config.max_position_embeddings:
            raise ValueError(f"max_seq_length ({config.max_seq_length}) exceeds the model's "
                             f"max_position_embeddings ({self.bert_config.max_position_embeddings})")
        self.task_names = [t.name for t in tasks]
        if remove_padding is None:  # XLA compiles static shapes; packed ones depend on the data
            remove_padding = (config.remove_padding
                              and not distribution.default_use_xla(config.use_xla))
        self.encoder = modeling.BertModel(self.bert_config, scope="electra",
                                          compute_dtype=config.compute_dtype, seed=seed,
                                          remove_padding=remove_padding)
        self.heads = [t.create_head(self.bert_config, seed) for t in tasks]

    # Plain Python under any tf.function: no tensor-dependent control flow here or below (the
    # train step already runs it with autograph=False); autograph's source conversion of every
    # layer doubled the tracing time of evaluation's predict step.
    @tf.autograph.experimental.do_not_convert
    def __call__(self, features: dict[str, tf.Tensor], *, training: bool, seed=None,
                 percent_done=0.0):
        """features: the batch (input_ids, input_mask, segment_ids, task_id int32 [B], task
        features); seed: int [2] (required when training).

        Returns:
          loss: float32 scalar, the SUM over rows of each row's own-task loss (the official
            release sums, not averages; padding rows, task_id = number of tasks, add 0).
          outputs: {"task_id": [B], <task name>: the head's outputs dict}.
        """
        encoder_output = self.encoder(features["input_ids"], features["input_mask"],
                                      features["segment_ids"], training=training, seed=seed)
        percent_done = tf.cast(percent_done, tf.float32)
        outputs = {"task_id": features["task_id"]}
        losses = []
        for i, head in enumerate(self.heads):
            seeds = None
            if training:
                # Heads draw dropout seeds from their own stream, distinct from the encoder's.
                seeds = layers.SeedStream(stateless_random.fold_in(
                    tf.cast(seed, tf.int64), 1_000_003 + i, alg=layers.RNG_ALG))
            task_losses, task_outputs = head(encoder_output, features, training=training,
                                             seeds=seeds, percent_done=percent_done)
            losses.append(tf.cast(task_losses, tf.float32))
            outputs[head.task_name] = task_outputs
        row_task = tf.one_hot(features["task_id"], len(self.heads), dtype=tf.float32)  # [B, T]
        loss = tf.reduce_sum(tf.stack(losses, axis=-1) * row_task)
        return loss, outputs

    def encoder_variables(self) -> dict[str, tf.Variable]:
        return checkpoint.by_name(self.encoder.variables)

    def restore_pretrained(self, path: str) -> checkpoint.RestoreReport:
        """Initialises the encoder from a pre-training (ours or official) checkpoint.

        Every `electra/...` encoder variable must be present; other tensors of the checkpoint
        (generator, pre-training heads, optimizer slots, global_step) are ignored and summarised.
        A GDES checkpoint's discriminator table is E_G + E_delta (model/embedding_sharing.py).

        Raises:
          ValueError: no checkpoint at `path`, or encoder variables missing / of another shape.
        """
        try:
            report = embedding_sharing.restore(self.encoder_variables(), path)
        except FileNotFoundError as e:
            raise ValueError(
                f"init_checkpoint: {e}. Give a checkpoint prefix or a directory holding one "
                "(official or from run_pretraining.py), or init_checkpoint \"\" to start from "
                "random weights") from None
        groups: dict[str, int] = {}
        for name in report.unused:
            top = name.split("/")[0]
            if name.endswith(("/adam_m", "/adam_v")):
                top = "optimizer slots"
            groups[top] = groups.get(top, 0) + 1
        summary = ", ".join(f"{k}: {v}" for k, v in sorted(groups.items())) or "none"
        log.info("restored %d encoder variables from %s; ignored %d other tensors (%s)",
                 len(report.restored), report.path, len(report.unused), summary)
        return report
