"""ModelRunner: trains, checkpoints, resumes and evaluates one fine-tuning trial.

One trial = one seed = one directory `<model_dir>_<trial>` holding its checkpoint (model,
optimizer slots, global_step), TensorBoard events, its settings and its dev results. Re-running
continues a halted trial from its newest checkpoint; the data order and dropout masks are pure
functions of (seed, step), so a resumed trial takes the same steps an uninterrupted one would.

The step follows the official release: loss = SUM over the batch of each row's own-task loss
(one replica). With several replicas each sums its share and the gradients are averaged, then
clipped once: the step of the mean replica batch, whatever the number of replicas. (The official
TPU CrossShardOptimizer clips each core's gradient and sums them: `clip_per_replica`,
docs/FIDELITY.md.) AdamW with warm-up + linear decay and layer-wise learning
rates comes from model/optimization.py; the step around the model's loss (float16 loss scaling,
the all-reduce, the finite check, the update, the loop) from util/step_engine.py. The network,
its optimizer and their traced functions live in finetune/trial_model.py, shared by the trials
of a run.
"""
import collections
import logging
import math
import os
import time
from typing import Any, Sequence

import numpy as np
import tensorflow as tf

import configure_finetuning
from finetune import preprocessing
from finetune import task as task_lib
from finetune import trial_model
from util import checkpoint
from util import distribution
from util import fs
from util import io_utils
from util import preemption
from util import resume
from util import step_engine
from util import task_spec
from util import training_utils

log = logging.getLogger(__name__)

STATE_PREFIX = trial_model.STATE_PREFIX
SETTINGS_FILE = "finetune_config.json"
RESULTS_FILE = "eval_results.json"
# Hparams that do not change what a trial learns: a resumed trial may differ in these.
NOT_TRAINING_SETTINGS = frozenset({
    "do_train", "do_eval", "num_trials", "keep_all_models", "log_examples", "write_test_outputs",
    "n_writes_test", "eval_batch_size", "predict_batch_size", "max_eval_examples",
    "iterations_per_loop", "save_checkpoints_steps", "use_tfrecords_if_existing", "use_xla",
    "strategy", "use_tpu", "num_tpu_cores", "tpu_job_name", "tpu_name", "tpu_zone", "gcp_project",
    "model_dir", "results_txt", "results_json", "preprocessed_data_dir", "test_predictions_dir",
    "qa_dir", "raw_data_dir", "data_dir", "model_name", "vocab_file", "qa_na_threshold",
    "n_best_size", "max_answer_length",
})



def training_settings(config: configure_finetuning.FinetuningConfig) -> dict[str, Any]:
    """The hparams a trial's checkpoint depends on (compared when resuming, without a custom
    task's task_spec.EVAL_ONLY_KEYS)."""
    return {k: v for k, v in config.to_dict().items() if k not in NOT_TRAINING_SETTINGS}


def without_eval_only_keys(settings: dict[str, Any]) -> dict[str, Any]:
    specs = settings.get("custom_tasks")
    if not isinstance(specs, dict):
        return settings
    return dict(settings, custom_tasks={name: task_spec.without_eval_only_keys(spec)
                                        for name, spec in specs.items()})


def trial_dir(config: configure_finetuning.FinetuningConfig, trial: int) -> str:
    return f"{config.model_dir}_{trial}"


def loop_block(steps_per_epoch: int, iterations_per_loop: int) -> int:
    """Steps per host round trip: about 50 progress updates per epoch, at most
    iterations_per_loop."""
    return max(1, min(iterations_per_loop, steps_per_epoch // 50))


class ModelRunner:
    """Builds the model of one trial; `initialize()`, then `train()` / `evaluate()` / `predict()`."""

    def __init__(self, config: configure_finetuning.FinetuningConfig,
                 tasks: Sequence[task_lib.Task], preprocessor: preprocessing.Preprocessor,
                 trial: int = 1, strategy: tf.distribute.Strategy | None = None,
                 models: trial_model.Cache | None = None):
        self.config = config
        self.tasks = list(tasks)
        self.trial = trial
        self.seed = config.seed + trial - 1
        self.model_dir = trial_dir(config, trial)
        self.preprocessor = preprocessor
        self.strategy = strategy or tf.distribute.get_strategy()
        self.is_chief = distribution.is_chief(self.strategy)
        self.train_data = None
        self.train_steps = 0
        for key in ("eval_batch_size", "predict_batch_size") + (
                ("train_batch_size",) if config.do_train else ()):
            distribution.per_replica_batch_size(getattr(config, key), self.strategy, key=key)
        if config.do_train:
            self.train_data = preprocessor.prepare_train()
            # As the official release: whole epochs of the padded set, epochs may be fractional.
            self.train_steps = max(1, int(self.train_data.steps_per_epoch *
                                          config.num_train_epochs))
        # Built and traced once per run: the next trial of the same run reuses it, reset.
        self.trial_model = (models or trial_model.Cache()).get(
            config, tasks, self.strategy, self.train_steps, self.seed)
        self.model = self.trial_model.model
        self.optimizer, self.engine = self.trial_model.optimizer, self.trial_model.engine
        self.float16 = self.trial_model.float16
        self.manager = checkpoint.CheckpointManager(self.model_dir, max_to_keep=1)
        self._restored_step = 0
        # {results name: why} for the evaluated splits whose predictions collapsed
        # (finetune/health.py); filled by evaluate().
        self.collapsed: dict[str, str] = {}

    # -- state ------------------------------------------------------------------------------------

    @property
    def global_step(self) -> int:
        if self.optimizer is not None:
            return int(self.optimizer.global_step.numpy())
        return self._restored_step  # evaluation only: the step of the restored checkpoint

    def _state_variables(self) -> dict[str, tf.Variable]:
        if self.engine is None:  # evaluation only
            return checkpoint.by_name(self.model.variables)
        return self.engine.checkpoint_variables(self.model.variables)

    def check_settings(self) -> None:
        """Refuses to resume a trial directory that was trained with other settings."""
        path = os.path.join(self.model_dir, SETTINGS_FILE)
        if not fs.exists(path) or self.manager.latest() is None:
            return
        record = io_utils.read_json(path)
        saved = without_eval_only_keys(record.get("training_settings", {}))
        refused, _ = resume.split_changes(saved, without_eval_only_keys(
                                              training_settings(self.config)),
                                          lambda key: key not in NOT_TRAINING_SETTINGS)
        if refused:
            raise ValueError(
                f"{self.model_dir} holds a trial trained with other settings ("
                + "; ".join(refused[:5]) + "). Delete that directory or set another model_dir.")
        # The training examples themselves (file content, a custom task's columns, the
        # vocabulary): continuing on other data, or calling a trial of a shrunk file finished
        # because its old step count is reached, would mix two trainings.
        if self.train_data is not None and "training_data" in record:
            changed = resume.key_changes(record["training_data"], self.train_data.key)
            if changed:
                raise ValueError(
                    f"{self.model_dir} holds a trial trained on other training data ("
                    + "; ".join(changed[:5]) + "). Delete that directory to train anew on the "
                    "current data, or restore the data it was trained on.")

    def initialize(self) -> str:
        """Resumes from the trial's checkpoint, else loads init_checkpoint; returns which."""
        self.check_settings()
        latest = self.manager.latest()
        if latest is not None:
            variables = self._state_variables()
            checkpoint.restore(variables, latest, allow_missing=self.optimizer is None)
            reader = checkpoint.load(latest)
            if reader.has_tensor("global_step"):
                self._restored_step = int(reader.get_tensor("global_step"))
            log.info("trial %d: resumed from %s (step %d)", self.trial, latest, self.global_step)
            return "resumed"
        if not self.config.do_train:
            log.warning("trial %d: do_train is false and %s holds no checkpoint: evaluating "
                        "untrained task heads", self.trial, self.model_dir)
        if self.config.init_checkpoint:
            self.model.restore_pretrained(self.config.init_checkpoint)
            source = "pretrained"
        else:
            log.warning("trial %d: no init_checkpoint; the encoder starts from random weights",
                        self.trial)
            source = "random"
        if self.is_chief and self.config.do_train:
            io_utils.write_json(os.path.join(self.model_dir, SETTINGS_FILE), {
                "training_settings": training_settings(self.config),
                "training_data": self.train_data.key, "train_steps": self.train_steps,
                "bert_config": self.model.bert_config.to_dict(), "init": source})
            # The trial carries its vocabulary (with its settings: casing, a custom task's
            # labels), so predict.py and exports need nothing else.
            vocab = self.config.vocab_file
            name = "spm.model" if vocab.endswith(".model") else "vocab.txt"
            io_utils.copy_file(vocab, os.path.join(self.model_dir, name))
        return source

    def save(self) -> str | None:
        if not self.is_chief:
            return None
        tensors = {name: var.read_value() for name, var in self._state_variables().items()}
        return self.manager.save(tensors, self.global_step)

    # -- training ---------------------------------------------------------------------------------

    def train(self) -> None:
        """Trains to `train_steps`, one progress bar per epoch, checkpointing as it goes."""
        config, data = self.config, self.train_data
        steps_per_epoch = data.steps_per_epoch
        n_epochs = math.ceil(self.train_steps / steps_per_epoch)
        step = self.global_step
        if step >= self.train_steps:
            log.info("trial %d: already trained (%d steps)", self.trial, step)
            return
        log.info("trial %d: training %d steps (%d epochs of %d batches of %d; %d examples), "
                 "starting at step %d", self.trial, self.train_steps, n_epochs, steps_per_epoch,
                 data.batch_size, data.n_real, step)
        summaries = training_utils.SummaryWriter(self.model_dir, enabled=self.is_chief)
        save_every = max(1, config.save_checkpoints_steps)
        # Host round trips per epoch: enough for a smooth bar, few enough to cost nothing. The
        # first block is one step, so that the first progress line shows when tracing ended.
        block = loop_block(steps_per_epoch, config.iterations_per_loop)
        first_step = step
        saved_step, last_save_time = step, time.time()  # the state at `step` is on disk
        shapes = collections.Counter()  # rows, positions and real tokens of the steps run here
        try:
            while step < self.train_steps:
                epoch = step // steps_per_epoch
                epoch_start = epoch * steps_per_epoch
                epoch_end = min(epoch_start + steps_per_epoch, self.train_steps)
                dataset = self.preprocessor.train_dataset(data, self.seed, epoch,
                                                          skip_batches=step - epoch_start)
                iterator = iter(self.strategy.experimental_distribute_dataset(dataset))
                progress = training_utils.Progress(
                    epoch_end - epoch_start, initial=step - epoch_start,
                    desc=f"trial {self.trial} epoch {epoch + 1}/{n_epochs}",
                    enabled=self.is_chief, min_log_interval=30.0)
                while step < epoch_end:
                    if preemption.requested():
                        self._stop_for_preemption(saved_step)
                    n = min(1 if step == first_step else block, epoch_end - step,
                            save_every - step % save_every)
                    steps = self.engine.run(iterator, n, preemption.deadline(
                        last_save_time, config.save_checkpoints_secs))
                    step, n = self.global_step, steps.ran
                    shapes.update({k: float(steps.sums[k]) for k in trial_model.METRICS[1:]})
                    values, checked_step = self._block_values(steps)
                    try:
                        training_utils.check_finite(values, checked_step, f" (trial {self.trial})")
                    except training_utils.NonFiniteError as e:
                        raise training_utils.NonFiniteError(
                            f"{e}; training stopped. Last good checkpoint: "
                            f"{self.manager.latest() or 'none'} (left in place)",
                            e.step, e.names) from None
                    progress.update(step - epoch_start, examples=n * data.batch_size,
                                    loss=values["loss"], lr=values["learning_rate"])
                    summaries.scalars(step, values, prefix="train/")
                    if steps.stop_reason == preemption.StopReason.PREEMPTED or \
                            preemption.requested():
                        progress.close()
                        self._stop_for_preemption(saved_step)
                    timed = steps.stop_reason == preemption.StopReason.TIMED
                    if (step % save_every == 0 or timed) and step < self.train_steps:
                        self.save()
                        saved_step, last_save_time = step, time.time()
                progress.close()
                if step != saved_step:  # every epoch and at the end: a rerun continues from here
                    self.save()
                    saved_step, last_save_time = step, time.time()
        finally:
            summaries.close()
        if shapes["rows"]:
            log.info("trial %d: mean padded length %.1f positions per row, %.1f of them real "
                     "tokens%s", self.trial, shapes["positions"] / shapes["rows"],
                     shapes["real_tokens"] / shapes["rows"],
                     " (the encoder's per-token work ran on the real ones)"
                     if self.model.encoder.remove_padding else "")

    def _block_values(self, steps: step_engine.Steps) -> tuple[dict[str, float], int]:
        """The logged values of a block of steps and the step they describe: the block's mean
        loss at the current step, or after a non-finite step (not applied) that step's own."""
        step = self.global_step
        loss = steps.sums["loss"] / np.float32(max(steps.counted, 1))
        if not steps.finite:
            loss, step = steps.last["loss"], step + 1
        values = {"loss": float(loss) / self.train_data.batch_size,
                  "grad_norm": float(steps.last["global_norm"]),
                  "learning_rate": float(self.optimizer.learning_rate())}
        if self.float16:
            values["loss_scale"] = float(self.engine.scaling.scale.numpy())
        return values, step

    def _stop_for_preemption(self, saved_step: int) -> None:
        """After a signal: saves the trial unless its newest checkpoint is at this step, then
        raises Preempted."""
        if self.global_step != saved_step:
            path = self.save()
            log.info("trial %d: saved checkpoint %s (step %d, preempted)", self.trial, path,
                     self.global_step)
        raise preemption.stopped(self.global_step, what=f"trial {self.trial} ")

    # -- evaluation -------------------------------------------------------------------------------

    def predict(self, task: task_lib.Task, split: str) -> list[dict[str, np.ndarray]]:
        """The head outputs of every example (feature row) of `task` on `split`, in file order."""
        data = self.preprocessor.prepare_predict([task], split)
        dataset = self.strategy.experimental_distribute_dataset(
            self.preprocessor.predict_dataset(data))
        predict_fn = self.trial_model.predict_fn(dataset.element_spec)
        task_index = self.config.task_names.index(task.name)
        rows: list[dict[str, np.ndarray]] = []
        for i, batch in enumerate(dataset):
            preemption.check(f"trial {self.trial}'s predictions on {task.name} {split} (batch "
                             f"{i + 1} of {data.steps_per_epoch})", "its checkpoint is saved: "
                             "re-run the same command to evaluate it")
            outputs = predict_fn(batch)
            task_ids = outputs["task_id"].numpy()
            mine = {k: v.numpy() for k, v in outputs[task.name].items()}
            for i in np.flatnonzero(task_ids == task_index):  # padding rows dropped
                rows.append({k: v[i] for k, v in mine.items()})
        if len(rows) != data.n_real:
            raise RuntimeError(f"{task.name} {split}: got outputs for {len(rows)} of "
                               f"{data.n_real} examples")
        return rows

    def evaluate_task(self, task: task_lib.Task, split: str = "dev",
                      results_name: str | None = None) -> dict[str, float]:
        scorer = task.get_scorer(split)
        rows = self.predict(task, split)
        for row in rows:
            scorer.update(row)
        log.info("trial %d %s %s: %s", self.trial, task.name, split, scorer.results_str())
        collapse = scorer.collapse()
        if collapse:
            self.collapsed[results_name or task.name] = collapse
            log.warning("trial %d %s %s: collapsed: %s", self.trial, task.name, split, collapse)
        if self.is_chief:  # e.g. per-word predictions, next to the results files
            for path in task.write_eval_outputs(scorer, split, self.trial):
                log.info("wrote %s", path)
            self._write_predictions(task, split, rows)
        return {k: float(v) for k, v in scorer.get_results()}

    def _write_predictions(self, task: task_lib.Task, split: str, rows) -> None:
        """<eval output prefix>_predictions.jsonl (FinetuningConfig.eval_output_prefix): what
        predict.py would write for the split's examples (custom tasks only: the built-in ones
        write their own formats)."""
        if task.name not in self.config.custom_tasks:
            return
        records = task.prediction_records(task.get_examples(split), rows)
        if records is None:
            return
        path = self.config.eval_output_prefix(task.name, split, self.trial) + "_predictions.jsonl"
        io_utils.write_jsonl(path, records)
        log.info("wrote %s", path)

    def evaluate(self) -> dict[str, dict[str, float]]:
        """{results name: {metric: value}} over every task's eval splits (MNLI: both)."""
        results = {}
        for task in self.tasks:
            for split, name in task.get_eval_splits():
                results[name] = self.evaluate_task(task, split, name)
        if self.is_chief:
            summaries = training_utils.SummaryWriter(os.path.join(self.model_dir, "eval"))
            for name, metrics in results.items():
                summaries.scalars(self.global_step, metrics, prefix=f"{name}/")
            summaries.close()
        return results

    def write_test_outputs(self, output_dir: str) -> list[str]:
        """Predictions on every task's test splits, in the task's submission format."""
        written = []
        for task in self.tasks:
            if type(task).write_test_predictions is task_lib.Task.write_test_predictions:
                log.warning("skipping test outputs of %s: the task has no submission format",
                            task.name)
                continue
            for split in task.get_test_splits():
                try:
                    rows = self.predict(task, split)
                except task_lib.TaskDataError as e:
                    if split == "diagnostic":  # optional in most GLUE copies
                        log.warning("skipping %s %s: %s", task.name, split, e)
                        continue
                    raise
                written += task.write_test_predictions(rows, split, output_dir)
        for path in written:
            log.info("wrote %s", path)
        return written
