"""The network of a fine-tuning trial with its optimizer, training step and forward pass, built
and traced once per process and re-initialised for each trial.

Trials of a run differ only in their seed (the head initialisation, dropout, data order), so a
second trial reuses the first one's variables and traced tf.functions: `reset(seed)` assigns the
new trial's initial weights, zeroes the optimizer's step and slots and resets the loss scale,
and the traced step reads the seed from a variable. Tracing ELECTRA-Small's step takes several
seconds on a CPU; a retrace per trial (or per evaluation) was pure overhead.

Dropout seeds: per replica a function of (seed, step, replica); the progress through training
(`percent_done`, read by some heads) is step / train_steps.
"""
import logging
from typing import Sequence

import tensorflow as tf

import configure_finetuning
from finetune import bucketing
from finetune import finetuning_model
from finetune import task as task_lib
from model import optimization
from util import checkpoint
from util import distribution
from util import stateless_random, step_engine

log = logging.getLogger(__name__)

STATE_PREFIX = "finetune_state/"
# Summed over a block of steps: the loss, and the rows, padded positions and real tokens the
# encoder saw (the trainer logs the mean padded length).
METRICS = ("loss", "rows", "positions", "real_tokens")


class TrialModel:
    """Model, optimizer (when training), step engine and predict function of one run's trials."""

    def __init__(self, config: configure_finetuning.FinetuningConfig,
                 tasks: Sequence[task_lib.Task], strategy: tf.distribute.Strategy,
                 train_steps: int, seed: int):
        self.config, self.tasks, self.strategy = config, list(tasks), strategy
        self.train_steps = train_steps
        self.float16 = config.compute_dtype == "float16"
        self.use_xla = distribution.default_use_xla(config.use_xla)
        with strategy.scope():
            # Read by the traced step; never checkpointed (a trial's seed is its number).
            self.seed = tf.Variable(tf.constant(seed, tf.int64), trainable=False,
                                    name="trial_seed")
            self.model = finetuning_model.FinetuningModel(config, tasks, seed=seed)
            self.optimizer = self.engine = None
            if config.do_train:
                self.optimizer = optimization.create_optimizer(
                    self.model.trainable_variables, config.learning_rate, train_steps,
                    weight_decay_rate=config.weight_decay_rate,
                    warmup_proportion=config.warmup_proportion,
                    layerwise_lr_decay=config.layerwise_lr_decay,
                    num_layers=self.model.bert_config.num_hidden_layers,
                    clip_norm=None if config.clip_per_replica else config.clip_norm,
                    bias_correction=config.adam_bias_correction,
                    decay_after_warmup=config.lr_decay_after_warmup,
                    official_layerwise=config.layerwise_lr_decay_official)
                self.engine = step_engine.StepEngine(
                    strategy, self.optimizer, self.model.trainable_variables,
                    inputs_fn=self._step_inputs, loss_fn=self._loss, metric_names=METRICS,
                    float16=self.float16, state_prefix=STATE_PREFIX, use_xla=self.use_xla,
                    mean_over_replicas=not config.clip_per_replica, count_skipped_steps=True,
                    clip_per_replica=config.clip_norm if config.clip_per_replica else None)
        self._predict_fn = None

    def fits(self, config, tasks: Sequence[task_lib.Task], strategy, train_steps: int) -> bool:
        """True when a trial of these settings can reuse this model (the same run)."""
        return (config is self.config and list(tasks) == self.tasks and strategy is self.strategy
                and train_steps == self.train_steps)

    def reset(self, seed: int) -> None:
        """The state a newly built TrialModel of `seed` would have."""
        with self.strategy.scope():
            fresh = finetuning_model.FinetuningModel(self.config, self.tasks, seed=seed)
        checkpoint.assign_by_name(self.model.variables, fresh.variables)
        if self.optimizer is not None:
            for variable in self.optimizer.variables:  # global_step and Adam slots start at 0
                variable.assign(tf.zeros_like(variable))
        if self.engine is not None and self.engine.scaling is not None:
            self.engine.scaling.reset()
        self.seed.assign(seed)

    # -- training ---------------------------------------------------------------------------------

    def _step_inputs(self, features):
        step = self.optimizer.global_step.read_value()
        seed = tf.stack([self.seed.read_value(), step])
        if self.strategy.num_replicas_in_sync > 1:
            seed = stateless_random.fold_in(
                seed, tf.distribute.get_replica_context().replica_id_in_sync_group,
                alg="auto_select")
        return features, (seed, tf.cast(step, tf.float32) / float(self.train_steps))

    def _loss(self, features, micro_batch, seed, percent_done):
        loss, _ = self.model(features, training=True, seed=seed, percent_done=percent_done)
        mask = features["input_mask"]
        sizes = tf.cast(tf.stack([tf.shape(mask)[0], tf.size(mask), tf.reduce_sum(mask)]),
                        tf.float32)
        return loss, tf.concat([tf.reshape(loss, [1]), sizes], 0)

    # -- inference --------------------------------------------------------------------------------

    def predict_fn(self, element_spec):
        """The forward pass, traced once for every bucket length and batch size (per-replica
        batches: tf.function relaxes their shapes after the first retrace)."""
        if self._predict_fn is None:
            self._predict_fn = self._build_predict_fn(element_spec)
        return self._predict_fn

    def _build_predict_fn(self, element_spec):
        model, strategy = self.model, self.strategy

        def replica_predict(features):
            _, outputs = model(features, training=False)
            return outputs

        def predict_step(features):
            outputs = strategy.run(replica_predict, args=(features,))
            if strategy.num_replicas_in_sync > 1:
                outputs = tf.nest.map_structure(lambda t: strategy.gather(t, axis=0), outputs)
            return outputs

        signature = bucketing.relaxed_signature(element_spec)
        if signature is None:
            return tf.function(predict_step, reduce_retracing=True, autograph=False)
        return tf.function(predict_step, input_signature=[signature], autograph=False)


class Cache:
    """Hands the previous trial's TrialModel, reset, to the next trial of the same run."""

    def __init__(self):
        self._last: TrialModel | None = None

    def get(self, config, tasks, strategy, train_steps: int, seed: int) -> TrialModel:
        last = self._last
        if last is not None and last.fits(config, tasks, strategy, train_steps):
            last.reset(seed)
            log.info("reusing the traced model of the previous trial (seed %d)", seed)
            return last
        self._last = TrialModel(config, tasks, strategy, train_steps, seed)
        return self._last
