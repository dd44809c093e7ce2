"""The optimizer step and the loop of steps, shared by pre-training and fine-tuning.

A trainer gives the engine two functions and keeps only what is its own:
  inputs_fn(features) -> (inputs, args)  per replica, before the forward pass (pre-training
      masks and all-reduces its loss denominators here, fine-tuning draws its dropout seed);
  loss_fn(inputs, micro_batch, *args) -> (loss, metrics)  the replica's loss on one
      accumulation micro-batch, and a float32 vector of metric sums.

One step:
  1. per replica: gradients of the loss (float16: scaled up, then down; see util/loss_scale.py),
     summed over `accumulation_steps` micro-batches (optionally XLA-compiled);
  2. per replica: ONE all-reduce of gradients and metrics; the gradient norm after it (with
     `clip_per_replica`, each replica's gradient is clipped before the all-reduce);
  3. cross-replica, so every replica decides alike: finite metrics and norm -> the optimizer
     update (clipping and AdamW: model/optimization.py); otherwise the update is discarded,
     float16 skips the step and halves the loss scale, and a non-finite step at scale 1 (or any
     in float32/bfloat16) ends the loop.
`run` takes up to N steps in one tf.while_loop, and leaves it early after the step during which a
stop was requested or the deadline passed (util/preemption.py).

Checkpoint state besides the weights: the optimizer's `global_step` and slots, and the loss
scale (`<prefix>loss_scale`, `<prefix>loss_scale_good_steps`).
"""
import math
from typing import Callable, NamedTuple, Sequence

import tensorflow as tf

from util import checkpoint, preemption
from util.loss_scale import INITIAL_SCALE, DynamicLossScale


class Steps(NamedTuple):
    """What one `StepEngine.run` call did."""
    ran: int  # batches consumed
    counted: int  # steps that advanced global_step
    finite: bool  # False: stopped at a non-finite step (not applied, not counted)
    sums: dict  # metric name -> sum over the counted steps (numpy float32); "global_norm" last
    last: dict  # the last step's metrics; its global_norm is 0 when float16 skipped it
    stop_reason: int  # preemption.StopReason


class StepEngine:
    """Loss scale, accumulators and the compiled loop for `variables` under `strategy`.

    Options where the two trainers differ, each for a reason of its own:
      mean_over_replicas: average the replicas' gradients (fine-tuning: each replica's loss sums
        its own rows, so the mean is the gradient of the mean row-sum, the same for any number of
        replicas) instead of summing them (pre-training: each replica's loss is already its share
        of the global batch's loss).
      clip_per_replica: the official TPU rule (the release's CrossShardOptimizer): each
        replica's gradient clipped at this global norm, the clipped gradients then summed (the
        optimizer must not clip again). None (default): the replicas' gradients combined first
        and clipped once by the optimizer, as one device would (docs/FIDELITY.md).
      count_skipped_steps: a float16 step skipped for overflow still advances global_step
        (fine-tuning: data order and epochs follow global_step) and enters the metric sums with
        gradient norm 0; pre-training tracks its data position itself and counts only updates.
      always_save_loss_scale: the loss scale is in the checkpoint even when unused (pre-training
        checkpoints always held it, 1.0); otherwise only with float16.
    """

    def __init__(self, strategy: tf.distribute.Strategy, optimizer,
                 variables: Sequence[tf.Variable], *, inputs_fn: Callable, loss_fn: Callable,
                 metric_names: Sequence[str], float16: bool, state_prefix: str,
                 accumulation_steps: int = 1, use_xla: bool = False,
                 mean_over_replicas: bool = False, count_skipped_steps: bool = False,
                 always_save_loss_scale: bool = False, clip_per_replica: float | None = None):
        self.strategy, self.optimizer, self.variables = strategy, optimizer, list(variables)
        self.inputs_fn, self.loss_fn = inputs_fn, loss_fn
        self.metric_names = tuple(metric_names) + ("global_norm",)
        self.float16 = float16
        self.accumulation_steps = accumulation_steps
        self.mean_over_replicas = mean_over_replicas
        if clip_per_replica is not None and (clip_per_replica <= 0 or mean_over_replicas):
            raise ValueError("clip_per_replica must be > 0 and sums the replicas' gradients "
                             "(not with mean_over_replicas)")
        self.clip_per_replica = clip_per_replica
        self.count_skipped_steps = count_skipped_steps
        with strategy.scope():
            self.scaling = None
            if float16 or always_save_loss_scale:
                self.scaling = DynamicLossScale(state_prefix, INITIAL_SCALE if float16 else 1.0)
            # Per-replica gradient sums of accumulation micro-batches (never checkpointed).
            self._accumulators = [
                tf.Variable(tf.zeros(v.shape, tf.float32), trainable=False,
                            name="gradient_accumulator",
                            synchronization=tf.VariableSynchronization.ON_READ,
                            aggregation=tf.VariableAggregation.SUM)
                for v in self.variables] if accumulation_steps > 1 else []
        # autograph=False: the loops below are explicit tf.while_loops and the model code has
        # no tensor-dependent Python control flow; skipping autograph's source conversion of the
        # whole model halves the time to the first step.
        self._gradients_fn = (tf.function(self._gradients, jit_compile=True, autograph=False)
                              if use_xla else self._gradients)
        self._loop_fn = tf.function(self._loop, autograph=False)

    def checkpoint_variables(self, weights: Sequence[tf.Variable], state: Sequence[tf.Variable] = ()
                             ) -> dict[str, tf.Variable]:
        """name -> variable of everything a checkpoint holds: the weights, the optimizer's step and
        slots, the trainer's own `state` and the loss scale."""
        scale = self.scaling.variables if self.scaling is not None else []
        return checkpoint.by_name(list(weights) + list(self.optimizer.variables) + list(state)
                                  + scale)

    # -- per replica -----------------------------------------------------------------------------

    def all_reduce(self, tensors: list) -> list:
        """Sums float32 tensors over replicas in ONE all-reduce (not one per variable)."""
        if self.strategy.num_replicas_in_sync == 1:
            return tensors
        flat = tf.distribute.get_replica_context().all_reduce(
            tf.distribute.ReduceOp.SUM, tf.concat([tf.reshape(t, [-1]) for t in tensors], 0))
        # Dynamic sizes: some gradients (of gathered tables) lose their static shape.
        parts = tf.split(flat, tf.stack([tf.size(t) for t in tensors]), num=len(tensors))
        return [tf.reshape(p, tf.shape(t)) for p, t in zip(parts, tensors)]

    def _gradients(self, inputs, args, scale):
        """Gradients (float32, dense, unscaled) and metric sums of one replica batch."""
        k = self.accumulation_steps

        def micro(part, index):
            with tf.GradientTape() as tape:
                loss, metrics = self.loss_fn(part, index, *args)
                scaled = loss * scale if self.float16 else loss
            grads = tape.gradient(scaled, self.variables)
            # Every variable gets a gradient (zeros where the loss does not reach it): the
            # accumulators and the packed all-reduce need one tensor per variable.
            grads = [tf.zeros_like(v) if g is None else _dense(g)
                     for g, v in zip(grads, self.variables)]
            if self.float16:
                grads = [g / scale for g in grads]
            return grads, metrics

        if k == 1:
            return micro(inputs, 0)
        split = tf.nest.map_structure(
            lambda t: tf.reshape(t, tf.concat([[k, -1], tf.shape(t)[1:]], 0)), inputs)

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
                                   (start, tf.zeros([len(self.metric_names) - 1])))
        with tf.control_dependencies([metrics]):
            return [acc.read_value() for acc in self._accumulators], metrics

    def _replica_step(self, features):
        inputs, args = self.inputs_fn(features)
        scale = self.scaling.scale.read_value() if self.float16 else tf.constant(1.0)
        grads, metrics = self._gradients_fn(inputs, args, scale)
        if self.clip_per_replica is not None:
            # A non-finite norm makes every gradient NaN: the finite check below still sees it.
            grads, _ = tf.clip_by_global_norm(grads, self.clip_per_replica)
        reduced = self.all_reduce(list(grads) + [metrics])
        grads, metrics = reduced[:-1], reduced[-1]
        replicas = self.strategy.num_replicas_in_sync
        if self.mean_over_replicas and replicas > 1:
            grads = [g / replicas for g in grads]
        return grads, tf.concat([metrics, [tf.linalg.global_norm(grads)]], 0)

    def _apply(self, grads, values, ok=None):
        self.optimizer.apply(grads, self.variables, global_norm=values[-1], only_if=ok)

    # -- the loop (cross-replica context) --------------------------------------------------------

    def _loop(self, iterator, num_steps, deadline):
        zeros = tf.zeros([len(self.metric_names)], tf.float32)

        def body(ran, counted, finite, sums, last, stop):
            grads, replica_values = self.strategy.run(self._replica_step, args=(next(iterator),))
            values = self.strategy.experimental_local_results(replica_values)[0]
            ok = tf.reduce_all(tf.math.is_finite(values))
            # float16: an overflow skips the step and halves the scale; only a non-finite step
            # at the smallest scale (1) means the model itself diverged.
            diverged = tf.logical_and(~ok, self.scaling.scale <= 1.0) if self.float16 else ~ok
            counts = tf.logical_or(ok, ~diverged) if self.count_skipped_steps else ok
            # Not a tf.cond: a step that is not applied computes its update and discards it
            # (AdamWeightDecay.apply's only_if). The same result, and tracing a cond cost a
            # placeholder for every variable and slot the branch captured.
            self.strategy.run(self._apply, args=(grads, replica_values, ok))
            if self.count_skipped_steps:
                self.optimizer.global_step.assign_add(
                    tf.cast(tf.logical_and(counts, ~ok), self.optimizer.global_step.dtype))
            if self.float16:
                with tf.control_dependencies([diverged]):
                    self.scaling.update(ok)
            skipped = tf.logical_and(~ok, ~diverged)
            values = tf.concat([values[:-1], tf.where(skipped, 0.0, values[-1:])], 0)
            with tf.control_dependencies([values]):
                stop = preemption.stop_code(self.strategy, deadline)
            return (ran + 1, counted + tf.cast(counts, tf.int32), ~diverged,
                    sums + tf.where(counts, values, zeros), values, stop)

        def cond(ran, counted, finite, sums, last, stop):
            return tf.logical_and(tf.logical_and(ran < num_steps, finite),
                                  tf.equal(stop, preemption.StopReason.NONE))

        return tf.while_loop(cond, body, (tf.constant(0), tf.constant(0), tf.constant(True),
                                          zeros, zeros, tf.constant(preemption.StopReason.NONE)))

    def run(self, iterator, num_steps: int, deadline: float = math.inf) -> Steps:
        """Up to `num_steps` steps in one call; stops early at a non-finite step, and after the
        step during which a stop was requested or the wall clock (time.time()) passed
        `deadline`."""
        ran, counted, finite, sums, last, stop = self._loop_fn(
            iterator, tf.constant(num_steps, tf.int32), tf.constant(deadline, tf.float64))
        return Steps(int(ran), int(counted), bool(finite),
                     dict(zip(self.metric_names, sums.numpy())),
                     dict(zip(self.metric_names, last.numpy())), int(stop))


def _dense(grad):
    return tf.convert_to_tensor(grad) if isinstance(grad, tf.IndexedSlices) else grad
