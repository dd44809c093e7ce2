"""The host loop of a pre-training run: blocks of steps (Trainer.train_steps) between stops, with
checkpoints (every save_checkpoints_steps or save_checkpoints_secs, and at the end), periodic
evals, logs and TensorBoard scalars. A signal (util/preemption.py) ends it after the current step
with a checkpoint at that step (every worker of a multi-worker run at the same step: each stop
decision is all-reduced, inside the loop of steps and between blocks); a non-finite step ends it
with the last good checkpoint left in place.
"""
import logging
import math
import time

from configure_pretraining import PretrainingConfig
from pretrain import evaluation, health, input_pipeline, training_health
from pretrain.trainer import Trainer
from util import checkpoint, place_locks, preemption
from util import training_utils as tu

log = logging.getLogger(__name__)


def _next_stop(step: int, config: PretrainingConfig) -> int:
    stops = [config.num_train_steps, step + max(1, config.iterations_per_loop)]
    for every in (config.save_checkpoints_steps, config.eval_every_steps):
        if every and every > 0:
            stops.append((step // every + 1) * every)
    return min(stops)


def _stop_for_preemption(trainer: Trainer, saved_step: int, save) -> None:
    """After a signal (util/preemption.py): saves unless the newest checkpoint is at this step,
    then raises Preempted."""
    if trainer.global_step != saved_step:
        save("preempted")
    raise preemption.stopped(trainer.global_step)


def _eval_or_stop(config: PretrainingConfig, trainer: Trainer, files: list[str], chief: bool,
                  writer: tu.SummaryWriter, monitor: health.Monitor | None, saved_step: int,
                  save) -> None:
    """A periodic eval; a signal during it (util/preemption.check, every batch) ends the run
    like one during training: saved at this step, the eval owed to the re-run. The chief's
    probes stop on its own signal alone; the workers then agree (preemption.requested) so
    that all of them stop here, not only the chief."""
    try:
        evaluation.run_eval(config, trainer, files, chief, writer, monitor)
    except preemption.Preempted as e:
        log.warning("%s", e)
    if preemption.requested(trainer.strategy):
        _stop_for_preemption(trainer, saved_step, save)


def _save_reason(config: PretrainingConfig, step: int, stop_reason: int) -> str | None:
    """Why a checkpoint is due at `step` (None: it is not)."""
    if step >= config.num_train_steps:
        return "end of training"
    if config.save_checkpoints_steps > 0 and step % config.save_checkpoints_steps == 0:
        return f"every {config.save_checkpoints_steps} steps"
    if stop_reason == preemption.StopReason.TIMED:
        return f"every {config.save_checkpoints_secs:g} s"
    return None


def _non_finite_error(result, step: int, last_saved: str | None) -> tu.NonFiniteError:
    shown = ", ".join(f"{k}={v:.4g}" for k, v in result.bad_metrics.items())
    return tu.NonFiniteError(
        f"non-finite loss or gradient at step {step} ({shown}); the update was not applied and "
        f"training stopped. Last good checkpoint: {last_saved or 'none'} (left in place). "
        f"Try: {health.BY_NAME['loss_not_finite'].remedy}",
        step=step, names=[k for k, v in result.bad_metrics.items() if not math.isfinite(v)])


def _report(config: PretrainingConfig, trainer: Trainer, result, elapsed: float,
            progress: tu.Progress, writer: tu.SummaryWriter) -> float:
    """The progress line and TensorBoard scalars of a block of steps; returns the learning rate."""
    step, lr = trainer.global_step, trainer.learning_rate()
    examples = result.steps_run * config.train_batch_size
    progress.update(step, examples=examples, loss=result.metrics["loss"], lr=lr)
    scalars = dict(result.metrics, learning_rate=lr,
                   examples_per_sec=examples / max(elapsed, 1e-9),
                   steps_per_sec=result.steps_run / max(elapsed, 1e-9))
    if trainer.float16:
        scalars["loss_scale"] = float(trainer.loss_scale.numpy())
        if result.steps_applied < result.steps_run:
            progress.write(f"float16: skipped {result.steps_run - result.steps_applied} "
                           f"overflowing step(s) before step {step}")
    writer.scalars(step, scalars, prefix="train/")
    return lr


def train(config: PretrainingConfig, trainer: Trainer, files: input_pipeline.DataFiles,
          chief: bool, lock: place_locks.Locks | None = None,
          monitor: health.Monitor | None = None) -> None:
    """Trains from the trainer's step to num_train_steps. `monitor`: the run's health (the
    final eval's too, so a state found between evals reaches its results); the chief's own
    when not given."""
    manager = checkpoint.CheckpointManager(config.model_dir, config.keep_checkpoint_max)
    step = trainer.global_step
    if step >= config.num_train_steps:
        log.info("already trained: step %d >= num_train_steps %d", step, config.num_train_steps)
        return
    writer = tu.SummaryWriter(config.model_dir, enabled=chief)
    progress = tu.Progress(config.num_train_steps, initial=step, enabled=chief,
                           min_log_interval=10.0)
    iterator = trainer.train_iterator(files.train)
    if monitor is None and chief:
        monitor = evaluation.new_monitor(config)
    checks = training_health.HealthChecks(config.health_every_steps, monitor, writer)
    last_saved = manager.latest()
    saved_step = step  # the state at `step` is on disk (restored from it, or step 0)
    start = last_save_time = time.time()

    def save(why: str) -> str | None:
        if not chief:
            return manager.latest()
        path = manager.save(trainer.checkpoint_tensors(), trainer.global_step)
        writer.flush()
        progress.write(f"saved checkpoint {path} (step {trainer.global_step}, {why}, "
                       f"{tu.secs_to_str(time.time() - start)} this run)")
        return path

    try:
        if config.eval_every_steps > 0 and step % config.eval_every_steps == 0 and \
                0 < step < config.num_train_steps and not evaluation.has_eval(config, step) and \
                not preemption.requested(trainer.strategy):
            # The previous run stopped between this checkpoint and its eval: still owed.
            _eval_or_stop(config, trainer, files.eval, chief, writer, monitor, saved_step, save)
        first_step, block_end = step, step
        while step < config.num_train_steps:
            if preemption.requested(trainer.strategy):  # every worker votes, then all stop
                _stop_for_preemption(trainer, saved_step, save)
            if block_end <= step:
                block_end = _next_stop(step, config)
            loop_start, block_start = time.time(), step
            # The first block is one step, so that its progress line marks when tracing and the
            # first compiles ended; the next one ends where the first would have (blocks do
            # not change results).
            result = trainer.train_steps(
                iterator, 1 if step == first_step else block_end - step,
                deadline=preemption.deadline(last_save_time, config.save_checkpoints_secs))
            elapsed = time.time() - loop_start
            step = trainer.global_step
            if not result.finite:
                raise _non_finite_error(result, step + 1, last_saved)
            lr = _report(config, trainer, result, elapsed, progress, writer)
            checks.after_block(result, block_start, step, lr)
            if lock is not None:
                lock.heartbeat()
            if result.stop_reason == preemption.StopReason.PREEMPTED or \
                    preemption.requested(trainer.strategy):
                _stop_for_preemption(trainer, saved_step, save)
            why = _save_reason(config, step, result.stop_reason)
            if why:
                last_saved = save(f"{why}, loss {result.metrics['loss']:.4f}, lr {lr:.3g}")
                saved_step, last_save_time = step, time.time()
            # Periodic eval; the final one is do_eval's (after training).
            if config.eval_every_steps > 0 and step % config.eval_every_steps == 0 and not (
                    step >= config.num_train_steps and config.do_eval):
                _eval_or_stop(config, trainer, files.eval, chief, writer, monitor, saved_step,
                              save)
        checks.finish(step, config.model_dir)
    finally:
        progress.close()
        writer.close()
