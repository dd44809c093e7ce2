"""The pre-training step and loops: model, optimizer and run state under a tf.distribute strategy.

One optimizer step, per replica (the global batch split across replicas in order):
  1. mask the replica's examples (noise addressed by global example index, see pretrain/rng.py);
  2. all-reduce the loss denominators, so each replica's loss is its share of the GLOBAL loss
     (the per-replica losses sum to exactly the one-device loss of the same global batch);
  3. forward + backward (optionally XLA-compiled; optionally over gradient-accumulation
     micro-batches, the denominators still those of the whole batch);
  4. all-reduce the gradients (and the metric sums) before clipping;
  5. apply AdamW, unless the loss or gradient norm is not finite.
Steps 1-4 run inside `strategy.run`; the finite check and the update are decided in cross-replica
context, so every replica takes the same branch.

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
from model import optimization
from pretrain import input_pipeline, masking, pretrain_metrics
from pretrain import rng as rng_lib
from pretrain.objectives import functions
from pretrain.objectives.base import Denominators
from pretrain.pretraining_model import PretrainingModel
from util import checkpoint, distribution, preemption
from util.loss_scale import INITIAL_SCALE, DynamicLossScale

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
    bad_metrics: dict  # the non-finite step's metrics
    stop_reason: int = preemption.StopReason.NONE  # ended early: a signal or the time interval


def _dense(grad):
    return tf.convert_to_tensor(grad) if isinstance(grad, tf.IndexedSlices) else grad


class Trainer:
    """Builds the model, optimizer and state variables in `strategy.scope()` and runs steps."""

    def __init__(self, config: PretrainingConfig, special_ids: masking.SpecialIds,
                 strategy: tf.distribute.Strategy | None = None, use_xla: bool | None = None):
        self.config = config
        self.strategy = strategy or tf.distribute.get_strategy()
        self.use_xla = distribution.default_use_xla(
            config.use_xla if use_xla is None else use_xla)
        self.seed = config.seed
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
            self.model_vars = self.model.model_variables()
            self.trainable = [v for v in self.model_vars.values() if v.trainable]
            self.optimizer = optimization.create_optimizer(
                self.trainable, config.learning_rate, config.num_train_steps,
                weight_decay_rate=config.weight_decay_rate,
                num_warmup_steps=config.num_warmup_steps, lr_decay_power=config.lr_decay_power,
                clip_norm=config.clip_norm, bias_correction=config.adam_bias_correction,
                decay_after_warmup=config.lr_decay_after_warmup)
            # Per-replica gradient sums of accumulation micro-batches (never checkpointed).
            self._accumulators = [
                tf.Variable(tf.zeros(v.shape, tf.float32), trainable=False,
                            name="gradient_accumulator",
                            synchronization=tf.VariableSynchronization.ON_READ,
                            aggregation=tf.VariableAggregation.SUM)
                for v in self.trainable] if k > 1 else []
            agg = tf.VariableAggregation.ONLY_FIRST_REPLICA
            with tf.name_scope(""):
                self.input_position = tf.Variable(
                    tf.constant(input_pipeline.START, tf.int64), trainable=False,
                    name=STATE_PREFIX + "input_position", aggregation=agg)
            # Always in the checkpoint (1.0 and unused unless float16), as before.
            self.scaling = DynamicLossScale(STATE_PREFIX, INITIAL_SCALE if self.float16 else 1.0)
            self.loss_scale = self.scaling.scale
        # autograph=False: the loops below are explicit tf.while_loops and the model code has
        # no tensor-dependent Python control flow; skipping autograph's source conversion of the
        # whole model halves the time to the first step.
        self._grads_fn = (tf.function(self._grads, jit_compile=True, autograph=False)
                          if self.use_xla else self._grads)
        self._train_loop_fn = tf.function(self._train_loop, autograph=False)
        self._eval_step_fn = tf.function(self._eval_step, autograph=False)

    # -- variables and checkpoints -------------------------------------------------------------

    @property
    def global_step(self) -> int:
        return int(self.optimizer.global_step.numpy())

    def state_variables(self) -> dict[str, tf.Variable]:
        return checkpoint.by_name([self.input_position] + self.scaling.variables)

    def all_variables(self) -> dict[str, tf.Variable]:
        """Everything a checkpoint holds: weights, optimizer step and slots, run state."""
        names = dict(self.model_vars)
        names.update(checkpoint.by_name(self.optimizer.variables))
        names.update(self.state_variables())
        return names

    def checkpoint_tensors(self) -> dict[str, np.ndarray]:
        """name -> value (float32 weights whatever the compute dtype)."""
        return {name: var.numpy() for name, var in self.all_variables().items()}

    def restore(self, path: str) -> checkpoint.RestoreReport:
        """Restores a checkpoint written by `checkpoint_tensors` (exact resume)."""
        return checkpoint.restore(self.all_variables(), path)

    def init_from(self, path: str, keep_step: bool = False) -> checkpoint.RestoreReport:
        """Continued pre-training: model weights only (fresh optimizer slots), by name."""
        report = checkpoint.restore(self.model_vars, path, allow_missing=True)
        if not report.restored:
            raise ValueError(f"init_checkpoint {report.path} shares no variable name with the "
                             "model (is it an ELECTRA/BERT checkpoint?)")
        if keep_step:
            reader = tf.train.load_checkpoint(report.path)
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
                files, seed=cfg.seed, global_batch_size=cfg.train_batch_size,
                max_seq_length=cfg.max_seq_length, cycle_length=cfg.input_cycle_length,
                shuffle_buffer_size=cfg.shuffle_buffer_size, start_position=start,
                input_context=context)

        return iter(self.strategy.distribute_datasets_from_function(dataset_fn))

    def eval_iterator(self, files: list[str], num_batches: int):
        cfg = self.config

        def dataset_fn(context):
            return input_pipeline.eval_dataset(
                files, global_batch_size=cfg.eval_batch_size,
                max_seq_length=cfg.max_seq_length, num_batches=num_batches,
                input_context=context)

        return iter(self.strategy.distribute_datasets_from_function(dataset_fn))

    # -- one step, per replica -----------------------------------------------------------------

    def _replica_ids(self, batch_size: int):
        ctx = tf.distribute.get_replica_context()
        replica = tf.cast(ctx.replica_id_in_sync_group, tf.int64)
        return ctx, replica, replica * batch_size

    def _grads(self, masked: masking.MaskedInputs, step, replica, example_offset,
               denominators: Denominators, loss_scale):
        """Gradients (float32, unscaled) and the local metric sums of one replica batch."""
        k = self.config.gradient_accumulation_steps
        size = self.per_replica_batch // k  # examples per micro-batch
        base_seed = tf.random.experimental.stateless_fold_in(
            tf.stack([tf.constant(self.seed, tf.int64), step]), replica, alg="philox")
        rng = rng_lib.ExampleRng(self.seed, step, example_offset)

        def micro(inputs, index):
            seed = tf.random.experimental.stateless_fold_in(base_seed, index, alg="philox")
            micro_rng = rng.shifted(index * size)
            with tf.GradientTape() as tape:
                out = self.model(inputs, training=True, rng=micro_rng, dropout_seed=seed,
                                 denominators=denominators)
                scaled = out.total_loss * loss_scale if self.float16 else out.total_loss
            grads = tape.gradient(scaled, self.trainable)
            grads = [tf.zeros_like(v) if g is None else _dense(g)
                     for g, v in zip(grads, self.trainable)]
            if self.float16:
                grads = [g / loss_scale for g in grads]
            return grads, self._local_metrics(out)

        if k == 1:
            return micro(masked, 0)
        split = tf.nest.map_structure(
            lambda t: tf.reshape(t, tf.concat([[k, size], tf.shape(t)[1:]], 0)), masked)

        # The sums go into variables, not loop-carried tensors: Grappler merged `carried + new`
        # with the backward pass's own AddN into one AddN, and its memory optimizer lowered that
        # to a TemporaryVariable whose name collided between iterations (Base at seq 512).
        def body(index, metrics):
            part = tf.nest.map_structure(lambda t: tf.gather(t, index), split)
            grads, more_metrics = micro(part, index)
            updates = [acc.assign_add(g, read_value=False)
                       for acc, g in zip(self._accumulators, grads)]
            with tf.control_dependencies(updates):
                return index + 1, metrics + more_metrics

        resets = [acc.assign(tf.zeros_like(acc), read_value=False) for acc in self._accumulators]
        with tf.control_dependencies(resets):
            start = tf.constant(0)
        _, metrics = tf.while_loop(lambda index, _: index < k, body,
                                   (start, tf.zeros([len(TRAIN_METRICS) - 1])))
        with tf.control_dependencies([metrics]):
            return [acc.read_value() for acc in self._accumulators], metrics

    @staticmethod
    def _local_metrics(out) -> tf.Tensor:
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
        return tf.stack([out.total_loss, out.mlm_loss, out.disc_loss, mlm_correct,
                         tf.reduce_sum(w), disc_correct, disc_weight])

    def _replica_step(self, features):
        ctx, replica, offset = self._replica_ids(self.per_replica_batch)
        step = self.optimizer.global_step.read_value()
        rng = rng_lib.ExampleRng(self.seed, step, offset)
        masked = self.model.mask({k: features[k] for k in _FEATURES}, rng)
        denominators = Denominators(*self._all_reduce_packed(
            ctx, list(self.model.denominators(masked))))
        grads, metrics = self._grads_fn(masked, step, replica, offset, denominators,
                                        self.loss_scale.read_value())
        reduced = self._all_reduce_packed(ctx, list(grads) + [metrics])
        grads, metrics = reduced[:-1], reduced[-1]
        norm = tf.linalg.global_norm(grads)
        self.input_position.assign(features[input_pipeline.POSITION_KEY][0])
        return grads, tf.concat([metrics, [norm]], 0)

    def _all_reduce_packed(self, ctx, tensors: list) -> list:
        """Sums float32 tensors over replicas in ONE all-reduce (not one per variable)."""
        if self.strategy.num_replicas_in_sync == 1:
            return tensors
        flat = ctx.all_reduce(tf.distribute.ReduceOp.SUM,
                              tf.concat([tf.reshape(t, [-1]) for t in tensors], 0))
        # Dynamic sizes: some gradients (of gathered tables) lose their static shape.
        parts = tf.split(flat, tf.stack([tf.size(t) for t in tensors]), num=len(tensors))
        return [tf.reshape(p, tf.shape(t)) for p, t in zip(parts, tensors)]

    def _replica_apply(self, grads):
        self.optimizer.apply(grads, self.trainable)

    # -- loops (cross-replica context) ---------------------------------------------------------

    def _train_loop(self, iterator, num_steps, deadline):
        size = len(TRAIN_METRICS)

        def body(ran, applied, finite, sums, bad, stop):
            features = next(iterator)
            grads, metrics = self.strategy.run(self._replica_step, args=(features,))
            values = self.strategy.experimental_local_results(metrics)[0]
            ok = tf.reduce_all(tf.math.is_finite(values))
            tf.cond(ok, lambda: self.strategy.run(self._replica_apply, args=(grads,)) or 0,
                    lambda: 0)
            if self.float16:
                # Dynamic loss scaling: an overflow skips the step and halves the scale; only a
                # non-finite step at the smallest scale (1) means the model itself diverged.
                diverged = tf.logical_and(~ok, self.loss_scale <= 1.0)
                with tf.control_dependencies([diverged]):
                    self.scaling.update(ok)
            else:
                diverged = ~ok
            counted = tf.logical_and(ok, ~diverged)
            with tf.control_dependencies([values]):
                stop = preemption.stop_code(self.strategy, deadline)
            return (ran + 1, applied + tf.cast(counted, tf.int32), ~diverged,
                    sums + tf.where(counted, values, tf.zeros_like(values)),
                    tf.where(diverged, values, bad), stop)

        def cond(ran, applied, finite, sums, bad, stop):
            return tf.logical_and(tf.logical_and(ran < num_steps, finite),
                                  tf.equal(stop, preemption.StopReason.NONE))

        zeros = tf.zeros([size], tf.float32)
        ran, applied, finite, sums, bad, stop = tf.while_loop(
            cond, body, (tf.constant(0), tf.constant(0), tf.constant(True), zeros, zeros,
                         tf.constant(preemption.StopReason.NONE)))
        return sums, ran, applied, finite, bad, stop

    def train_steps(self, iterator, num_steps: int, deadline: float = math.inf) -> LoopResult:
        """Runs up to `num_steps` steps in one call. Stops early at a non-finite step, and after
        the step during which a stop was requested (util/preemption.py) or the wall clock
        (time.time()) passed `deadline`."""
        sums, ran, applied, finite, bad, stop = self._train_loop_fn(
            iterator, tf.constant(num_steps, tf.int32), tf.constant(deadline, tf.float64))
        sums, applied = sums.numpy(), int(applied)
        named = dict(zip(TRAIN_METRICS, sums))
        n = max(applied, 1)
        metrics = {
            "loss": named["loss"] / n, "mlm_loss": named["mlm_loss"] / n,
            "global_norm": named["global_norm"] / n,
            "masked_lm_accuracy": named["mlm_correct"] / max(named["mlm_weight"], 1e-9),
        }
        if self.model.has_discriminator:  # ELECTRA or Electric
            metrics["disc_loss"] = named["disc_loss"] / n
            metrics["disc_accuracy"] = named["disc_correct"] / max(named["disc_weight"], 1e-9)
        metrics = {k: float(v) for k, v in metrics.items()}
        return LoopResult(metrics, int(ran), applied, bool(finite),
                          {k: float(v) for k, v in zip(TRAIN_METRICS, bad.numpy())}, int(stop))

    # -- evaluation ----------------------------------------------------------------------------

    def _replica_eval(self, features, batch_index):
        ctx, replica, offset = self._replica_ids(self.per_replica_eval_batch)
        # Eval noise: fixed per batch (negative "steps" are never training steps), so figures at
        # different training steps compare the same masks.
        rng = rng_lib.ExampleRng(self.seed, -1 - tf.cast(batch_index, tf.int64), offset)
        masked = self.model.mask({k: features[k] for k in _FEATURES}, rng)
        denominators = Denominators(*self._all_reduce_packed(
            ctx, list(self.model.denominators(masked))))
        out = self.model(masked, training=False, rng=rng, denominators=denominators)
        sums = pretrain_metrics.batch_sums(out)
        sums["batches"] = sums["batches"] / float(self.strategy.num_replicas_in_sync)
        return ctx.all_reduce(tf.distribute.ReduceOp.SUM, sums)

    def _eval_step(self, iterator, batch_index):
        sums = self.strategy.run(self._replica_eval, args=(next(iterator), batch_index))
        return self.strategy.experimental_local_results(sums)[0]

    def evaluate(self, files: list[str], num_batches: int) -> dict:
        """Metrics of pretrain_metrics over `num_batches` held-out batches (fixed masks)."""
        iterator = self.eval_iterator(files, num_batches)
        totals: dict = {}
        for i in range(num_batches):
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
