"""A pre-training run's health checks between evals, on by default (hparam health_every_steps).

Held-out evals (pretrain/evaluation.py) run only with do_eval or eval_every_steps; between them,
and in a run without them, `HealthChecks` reads what every block of training steps computes
anyway: the learning rate after each block (lr_zero_early), and, pooled over health_every_steps
steps from warm-up + 20 on, the training batches' discriminator figures and masked-LM loss
(pretrain_metrics.train_health_sums, summed inside the step) for the states pretrain/health.py
can judge from them (health.TRAIN_CHECKED: the discriminator stalled or calling every token
replaced, the generator too strong or idle). A state found is logged once with its advice,
written to TensorBoard (health/<state>, beside train/disc_auc_real, train/disc_positive_rate,
train/disc_replaced_rate at each check) and kept in the run's monitor, so the next eval's results
carry it. The cost, measured by benchmarks/health_cost.py, is in BENCHMARKS.md.
"""
import logging

from pretrain import health, pretrain_metrics

log = logging.getLogger(__name__)


class HealthChecks:
    """The chief's checks after each block of steps (`monitor` None: a worker, no checks)."""

    def __init__(self, every_steps: int, monitor: health.Monitor | None, writer):
        """writer: a training_utils.SummaryWriter (scalars(step, values, prefix))."""
        self.every_steps, self.monitor, self.writer = every_steps, monitor, writer
        self.start = health.training_window_start(monitor.run) if monitor else 0
        self.checked_to: int | None = None  # the last step a training-batch check covered
        self._clear()

    def _clear(self) -> None:
        self.first: int | None = None  # the step before the window's first step
        self.steps, self.mlm_loss, self.sums = 0, 0.0, None

    def after_block(self, result, first: int, step: int, lr: float) -> None:
        """Steps first + 1 .. step ran (`result`: their trainer.LoopResult), ending at learning
        rate `lr`."""
        if self.monitor is None:
            return
        if self.monitor.after_steps(step, lr):
            self._write_states(step)
        # A block reaching back into the grace would read its early steps as a stall.
        if not self.every_steps or first < self.start or not result.steps_applied:
            return
        self.first = first if self.first is None else self.first
        self.steps += result.steps_applied
        self.mlm_loss += result.metrics["mlm_loss"] * result.steps_applied
        if result.health_sums is not None:
            self.sums = result.health_sums + (0.0 if self.sums is None else self.sums)
        if self.steps >= self.every_steps:
            self.check(step)

    def check(self, step: int) -> None:
        """Checks the steps pooled since the last check (none: nothing to do)."""
        if self.monitor is None or not self.steps:
            return
        figures = {"masked_lm_loss": self.mlm_loss / self.steps}
        if self.sums is not None:
            figures.update(pretrain_metrics.train_health_figures(self.sums))
        self.monitor.after_training_batches(self.first, step, figures)
        self.writer.scalars(step, {k: v for k, v in figures.items() if k.startswith("disc_")},
                            prefix="train/")
        self._write_states(step)
        self.checked_to = step
        self._clear()

    def _write_states(self, step: int) -> None:
        self.writer.scalars(step, {name: float(name in self.monitor.active)
                                   for name in health.BY_NAME}, prefix="health/")

    def finish(self, step: int, model_dir: str) -> None:
        """At the end of training: the last steps checked, and the run's health in one line."""
        if self.monitor is None:
            return
        self.check(step)
        active = self.monitor.active
        if active:
            log.warning("health at the end of training (step %d): %s; python "
                        "tools/inspect_run.py %s shows the run's curves", step,
                        health.line(active), model_dir)
        elif self.checked_to is not None:
            log.info("health at the end of training (step %d): ok (training batches checked "
                     "from step %d on)", step, self.start)
        elif self.every_steps:
            log.info("health: the training batches were not checked: the run stopped before "
                     "step %d (warm-up + %d steps), where the checks begin", self.start,
                     health.DISC_GRACE_STEPS)
