"""The pre-training step: model, optimizer and run state under a tf.distribute strategy.

What is pre-training's own, per replica (the global batch split across replicas in order), before
the step engine (util/step_engine.py) takes over the backward pass, loss scaling, gradient
accumulation, the all-reduce, the finite check and the update:
  1. mask the replica's examples (noise addressed by global example index, see pretrain/rng.py);
  2. all-reduce the loss denominators, so each replica's loss is its share of the GLOBAL loss
     (the per-replica losses sum to exactly the one-device loss of the same global batch; with
     gradient accumulation the denominators are still those of the whole batch); with
     `clip_per_replica` (the official TPU rule) each replica keeps its own denominators;
  3. the loss of the ELECTRA model and a vector of metric sums.

Run state saved beside the weights (names of its own): `pretrain_state/input_position` (the data
stream position of the last consumed batch), `pretrain_state/loss_scale` and
`pretrain_state/loss_scale_good_steps` (float16 dynamic loss scaling). There is no RNG state:
all randomness is a function of (seed, global_step, example index).
"""
import logging
import math
from typing import NamedTuple

import numpy as np
import tensorflow as tf

from configure_pretraining import PretrainingConfig
from model import embedding_sharing, optimization
from pretrain import input_pipeline, masking, pretrain_metrics
from pretrain import rng as rng_lib
from pretrain.objectives import functions
from pretrain.objectives.base import Denominators
from pretrain.pretraining_model import PretrainingModel
from util import checkpoint, distribution, preemption, stateless_random
from util.step_engine import StepEngine

log = logging.getLogger(__name__)

# Per-step metric vector: all-reduced sums over replicas, then the gradient norm.
TRAIN_METRICS = ("loss", "mlm_loss", "disc_loss", "mlm_correct", "mlm_weight", "disc_correct",
                 "disc_weight", "global_norm")
STATE_PREFIX = "pretrain_state/"
_FEATURES = ("input_ids", "input_mask", "segment_ids")


class LoopResult(NamedTuple):
    metrics: dict  # means over the applied steps (accuracies as ratios)
    steps_run: int  # batches consumed
    steps_applied: int  # optimizer updates (less than steps_run when float16 skipped some)
    finite: bool  # False: stopped at a non-finite loss/gradient (no update applied for it)
    bad_metrics: dict  # the non-finite step's metrics (empty when finite)
    stop_reason: int = preemption.StopReason.NONE  # ended early: a signal or the time interval
    # Sums of pretrain_metrics.TRAIN_HEALTH_SUMS over the applied steps (None: not computed,
    # health_every_steps 0 or no discriminator).
    health_sums: np.ndarray | None = None


class Trainer:
    """Builds the model, optimizer and state variables in `strategy.scope()` and runs steps."""

    def __init__(self, config: PretrainingConfig, special_ids: masking.SpecialIds,
                 strategy: tf.distribute.Strategy | None = None, use_xla: bool | None = None):
        self.config = config
        self.strategy = strategy or tf.distribute.get_strategy()
        self.use_xla = distribution.default_use_xla(
            config.use_xla if use_xla is None else use_xla)
        self.seed = config.seed
        # The data order's seed: the run's, or a new one once its tfrecords changed
        # (pretrain/data_record.py, set by pretrain/run_setup.py with the record it follows).
        self.data_seed = config.seed
        self.data_record: dict | None = None
        self.per_replica_batch = distribution.per_replica_batch_size(
            config.train_batch_size, self.strategy)
        self.per_replica_eval_batch = distribution.per_replica_batch_size(
            config.eval_batch_size, self.strategy, key="eval_batch_size")
        k = config.gradient_accumulation_steps
        if self.per_replica_batch % k:
            raise ValueError(
                f"hparam 'gradient_accumulation_steps' ({k}) must divide the per-replica batch "
                f"({self.per_replica_batch} = train_batch_size {config.train_batch_size} / "
                f"{self.strategy.num_replicas_in_sync} replicas)")
        self.float16 = config.compute_dtype == "float16"
        with self.strategy.scope():
            self.model = PretrainingModel(config, special_ids,
                                          unigram_counts=_unigram_counts(config))
            # The health checks' counts ride along with the step's metric sums (loop.py).
            self.health_sums = config.health_every_steps > 0 and self.model.has_discriminator
            metric_names = TRAIN_METRICS[:-1] + (
                pretrain_metrics.TRAIN_HEALTH_SUMS if self.health_sums else ())
            self.model_vars = self.model.model_variables()
            self.trainable = [v for v in self.model_vars.values() if v.trainable]
            self.optimizer = optimization.create_optimizer(
                self.trainable, config.learning_rate, config.num_train_steps,
                weight_decay_rate=config.weight_decay_rate,
                num_warmup_steps=config.num_warmup_steps, lr_decay_power=config.lr_decay_power,
                clip_norm=None if config.clip_per_replica else config.clip_norm,
                bias_correction=config.adam_bias_correction,
                decay_after_warmup=config.lr_decay_after_warmup)
            with tf.name_scope(""):
                self.input_position = tf.Variable(
                    tf.constant(input_pipeline.START, tf.int64), trainable=False,
                    name=STATE_PREFIX + "input_position",
                    aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
            self.engine = StepEngine(
                self.strategy, self.optimizer, self.trainable, inputs_fn=self._step_inputs,
                loss_fn=self._loss, metric_names=metric_names, float16=self.float16,
                state_prefix=STATE_PREFIX, accumulation_steps=k, use_xla=self.use_xla,
                always_save_loss_scale=True,
                clip_per_replica=config.clip_norm if config.clip_per_replica else None)
        self.loss_scale = self.engine.scaling.scale
        self._eval_step_fn = tf.function(self._eval_step, autograph=False)
        self._eval_datasets: dict[tuple, tf.distribute.DistributedDataset] = {}
        self._first_eval_batches: dict[tuple, dict[str, tf.Tensor]] = {}

    # -- variables and checkpoints -------------------------------------------------------------

    @property
    def global_step(self) -> int:
        return int(self.optimizer.global_step.numpy())

    def all_variables(self) -> dict[str, tf.Variable]:
        """Everything a checkpoint holds: weights, optimizer step and slots, run state."""
        return self.engine.checkpoint_variables(self.model_vars.values(), [self.input_position])

    def checkpoint_tensors(self) -> dict[str, np.ndarray]:
        """name -> value (float32 weights whatever the compute dtype)."""
        return {name: var.numpy() for name, var in self.all_variables().items()}

    def restore(self, path: str) -> checkpoint.RestoreReport:
        """Restores a checkpoint written by `checkpoint_tensors` (exact resume)."""
        return checkpoint.restore(self.all_variables(), path)

    def init_from(self, path: str, keep_step: bool = False) -> checkpoint.RestoreReport:
        """Continued pre-training: model weights only (fresh optimizer slots), by name; a GDES
        checkpoint gives a model without GDES the discriminator's table E_G + E_delta."""
        report = embedding_sharing.restore(self.model_vars, path, allow_missing=True)
        if not report.restored:
            raise ValueError(f"init_checkpoint {report.path} shares no variable name with the "
                             "model (is it an ELECTRA/BERT checkpoint?)")
        if keep_step:
            reader = checkpoint.load(report.path)
            if reader.has_tensor("global_step"):
                self.optimizer.global_step.assign(int(reader.get_tensor("global_step")))
        return report

    def learning_rate(self) -> float:
        return float(self.optimizer.learning_rate(self.optimizer.global_step.read_value()))

    # -- data ----------------------------------------------------------------------------------

    def train_iterator(self, files: list[str]):
        """Distributed iterator over the training stream, resumed at `input_position`."""
        cfg = self.config
        start = tuple(int(v) for v in self.input_position.numpy())

        def dataset_fn(context):
            return input_pipeline.train_dataset(
                files, seed=self.data_seed, global_batch_size=cfg.train_batch_size,
                max_seq_length=cfg.max_seq_length, cycle_length=cfg.input_cycle_length,
                shuffle_buffer_size=cfg.shuffle_buffer_size, start_position=start,
                input_context=context)

        return iter(self.strategy.distribute_datasets_from_function(dataset_fn))

    def eval_iterator(self, files: list[str], num_batches: int):
        """A fresh iterator over the held-out batches; the dataset is built once per (files,
        num_batches) and kept, so a periodic eval does not re-trace its map functions."""
        cfg = self.config
        key = (tuple(files), num_batches)
        if key not in self._eval_datasets:
            def dataset_fn(context):
                return input_pipeline.eval_dataset(
                    files, global_batch_size=cfg.eval_batch_size,
                    max_seq_length=cfg.max_seq_length, num_batches=num_batches,
                    input_context=context)

            self._eval_datasets[key] = self.strategy.distribute_datasets_from_function(dataset_fn)
        return iter(self._eval_datasets[key])

    def first_eval_batch(self, files: list[str]) -> dict[str, tf.Tensor]:
        """The first held-out batch (eval_batch_size rows, one device), read once per run: the
        health checks look at it after every eval."""
        key = tuple(files)
        if key not in self._first_eval_batches:
            self._first_eval_batches[key] = next(iter(input_pipeline.eval_dataset(
                files, global_batch_size=self.config.eval_batch_size,
                max_seq_length=self.config.max_seq_length, num_batches=1)))
        return self._first_eval_batches[key]

    # -- one step, per replica -----------------------------------------------------------------

    def _replica_ids(self, batch_size: int):
        replica = tf.cast(tf.distribute.get_replica_context().replica_id_in_sync_group, tf.int64)
        return replica, replica * batch_size

    def _masked_inputs(self, features, rng: rng_lib.ExampleRng, batch_size: int,
                       global_denominators=True):
        """The replica's examples masked, and the loss denominators of the whole global batch
        (global_denominators false: of the replica's own examples, the official TPU rule)."""
        # A distributed dataset's batches can reach the replica with their size unknown (those
        # of MultiWorkerMirroredStrategy do). Every batch has `batch_size` rows (drop_remainder),
        # and stating it lets the encoder run its small blocks as graph ops: a block of unknown
        # size is compiled by XLA (model/layers.py), a compile per block and shape.
        masked = self.model.mask({k: tf.ensure_shape(features[k], [batch_size, None])
                                  for k in _FEATURES}, rng)
        denominators = list(self.model.denominators(masked))
        if global_denominators:
            denominators = self.engine.all_reduce(denominators)
        return masked, Denominators(*denominators)

    def _step_inputs(self, features):
        replica, offset = self._replica_ids(self.per_replica_batch)
        step = self.optimizer.global_step.read_value()
        masked, denominators = self._masked_inputs(
            features, rng_lib.ExampleRng(self.seed, step, offset), self.per_replica_batch,
            global_denominators=not self.config.clip_per_replica)
        self.input_position.assign(features[input_pipeline.POSITION_KEY][0])
        return masked, (step, replica, offset, denominators)

    def _loss(self, masked: masking.MaskedInputs, micro_batch, step, replica, example_offset,
              denominators: Denominators):
        """The loss of one accumulation micro-batch and the local metric sums."""
        size = self.per_replica_batch // self.config.gradient_accumulation_steps
        seed = tf.stack([tf.constant(self.seed, tf.int64), step])  # dropout: per replica and
        for salt in (replica, micro_batch):                         # micro-batch
            seed = stateless_random.fold_in(seed, salt, alg="philox")
        rng = rng_lib.ExampleRng(self.seed, step, example_offset).shifted(micro_batch * size)
        out = self.model(masked, training=True, rng=rng, dropout_seed=seed,
                         denominators=denominators)
        return out.total_loss, self._local_metrics(out)

    def _local_metrics(self, out) -> tf.Tensor:
        w = out.masked_lm_weights
        mlm_correct = tf.reduce_sum(w * tf.cast(tf.equal(out.masked_lm_preds,
                                                         out.masked_lm_ids), tf.float32))
        if out.disc_preds is not None:
            mask = tf.cast(out.input_mask, tf.float32)
            disc_correct = tf.reduce_sum(
                mask * tf.cast(tf.equal(out.disc_preds, out.disc_labels), tf.float32))
            disc_weight = tf.reduce_sum(mask)
        else:
            disc_correct = disc_weight = tf.constant(0.0)
        metrics = tf.stack([out.total_loss, out.mlm_loss, out.disc_loss, mlm_correct,
                            tf.reduce_sum(w), disc_correct, disc_weight])
        if not self.health_sums:
            return metrics
        return tf.concat([metrics, pretrain_metrics.train_health_sums(out)], 0)

    def train_steps(self, iterator, num_steps: int, deadline: float = math.inf) -> LoopResult:
        """Runs up to `num_steps` steps in one call. Stops early at a non-finite step, and after
        the step during which a stop was requested (util/preemption.py) or the wall clock
        (time.time()) passed `deadline`."""
        steps = self.engine.run(iterator, num_steps, deadline)
        named, n = steps.sums, max(steps.counted, 1)
        if self.config.clip_per_replica:  # the replicas' own mean losses, summed: their mean
            n *= self.strategy.num_replicas_in_sync
        metrics = {
            "loss": named["loss"] / n, "mlm_loss": named["mlm_loss"] / n,
            "global_norm": named["global_norm"] / max(steps.counted, 1),
            "masked_lm_accuracy": named["mlm_correct"] / max(named["mlm_weight"], 1e-9),
        }
        if self.model.has_discriminator:  # ELECTRA or Electric
            metrics["disc_loss"] = named["disc_loss"] / n
            metrics["disc_accuracy"] = named["disc_correct"] / max(named["disc_weight"], 1e-9)
        metrics = {k: float(v) for k, v in metrics.items()}
        bad = {} if steps.finite else {k: float(v) for k, v in steps.last.items()
                                       if k in TRAIN_METRICS}
        health_sums = np.array([named[k] for k in pretrain_metrics.TRAIN_HEALTH_SUMS],
                               np.float64) if self.health_sums else None
        return LoopResult(metrics, steps.ran, steps.counted, steps.finite, bad, steps.stop_reason,
                          health_sums)

    # -- evaluation ----------------------------------------------------------------------------

    def _replica_eval(self, features, batch_index):
        _, offset = self._replica_ids(self.per_replica_eval_batch)
        # Eval noise: fixed per batch (negative "steps" are never training steps), so figures at
        # different training steps compare the same masks.
        rng = rng_lib.ExampleRng(self.seed, -1 - tf.cast(batch_index, tf.int64), offset)
        masked, denominators = self._masked_inputs(features, rng, self.per_replica_eval_batch)
        out = self.model(masked, training=False, rng=rng, denominators=denominators)
        sums = pretrain_metrics.batch_sums(out)
        sums["batches"] = sums["batches"] / float(self.strategy.num_replicas_in_sync)
        return tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, sums)

    def _eval_step(self, iterator, batch_index):
        sums = self.strategy.run(self._replica_eval, args=(next(iterator), batch_index))
        return self.strategy.experimental_local_results(sums)[0]

    def evaluate(self, files: list[str], num_batches: int) -> dict:
        """Metrics of pretrain_metrics over `num_batches` held-out batches (fixed masks)."""
        iterator = self.eval_iterator(files, num_batches)
        totals: dict = {}
        for i in range(num_batches):
            preemption.check(f"the eval at step {self.global_step} (batch {i + 1} of "
                             f"{num_batches})", "re-run the same command to evaluate",
                             self.strategy)
            sums = self._eval_step_fn(iterator, tf.constant(i, tf.int64))
            for key, value in sums.items():
                totals[key] = totals.get(key, 0.0) + np.asarray(value, np.float64)
        return pretrain_metrics.finalize(totals)


def _unigram_counts(config: PretrainingConfig):
    """Token counts on the training tfrecords, for unigram_generator (None otherwise)."""
    if not config.unigram_generator:
        return None
    files = input_pipeline.find_files(config.pretrain_tfrecords, config.eval_tfrecords).train
    return functions.count_unigrams(files, config.bert_config().vocab_size,
                                    config.max_seq_length, config.unigram_max_examples)
