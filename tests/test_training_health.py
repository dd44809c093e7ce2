"""The health checks every pre-training run makes between evals (pretrain/training_health.py):
the training step's own discriminator counts give the eval's health figures, and a stalled run
with default hparams is flagged from them, fed here as fabricated blocks of steps (the real run
is in tests/test_run_pretraining.py)."""
import logging
import types

import numpy as np
import pytest
import tensorflow as tf

from configure_pretraining import PretrainingConfig
from pretrain import health, pretrain_metrics, training_health

BUCKETS = pretrain_metrics.NUM_THRESHOLDS - 1


class Writer:
    """training_utils.SummaryWriter's scalars, kept: {tag: [(step, value)]}."""

    def __init__(self):
        self.scalars_written = {}

    def scalars(self, step, values, prefix=""):
        for name, value in values.items():
            self.scalars_written.setdefault(prefix + name, []).append((step, value))


def _outputs(rng, rows=8, length=32):
    mask = (np.arange(length)[None] < rng.randint(5, length + 1, [rows, 1])).astype(np.int32)
    labels = (rng.rand(rows, length) < 0.15).astype(np.int32) * mask
    probs = np.clip(0.3 * labels + 0.7 * rng.rand(rows, length), 0, 1).astype(np.float32)
    return types.SimpleNamespace(
        input_mask=tf.constant(mask), disc_labels=tf.constant(labels),
        disc_probs=tf.constant(probs), disc_preds=tf.constant((probs > 0.5).astype(np.int32)),
        masked_lm_weights=tf.ones([rows, 4]), masked_lm_ids=tf.zeros([rows, 4], tf.int32),
        masked_lm_preds=tf.zeros([rows, 4], tf.int32), masked_lm_example_loss=tf.ones([rows, 4]),
        total_loss=tf.constant(1.0), sampled_ids=tf.zeros([rows, 4], tf.int32),
        disc_example_loss=tf.ones([rows]))


def test_the_training_steps_counts_give_the_evals_health_figures():
    """Over the same outputs, the step's counts (summed over two batches) give the eval's
    real-token AUC, share called replaced and share replaced (pretrain_metrics.finalize)."""
    rng = np.random.RandomState(0)
    batches = [_outputs(rng), _outputs(rng)]
    sums = sum(pretrain_metrics.train_health_sums(out).numpy().astype(np.float64)
               for out in batches)
    assert sums.shape == (len(pretrain_metrics.TRAIN_HEALTH_SUMS),)
    totals = {}
    for out in batches:
        for key, value in pretrain_metrics.batch_sums(out).items():
            totals[key] = totals.get(key, 0.0) + np.asarray(value, np.float64)
    expected = pretrain_metrics.finalize(totals)
    got = pretrain_metrics.train_health_figures(sums)
    for key in ("disc_auc_real", "disc_positive_rate", "disc_replaced_rate"):
        assert got[key] == pytest.approx(expected[key], abs=1e-6), key


def _sums(called: float, replaced: float, auc_bucket_gap: int, real: float = 16384.0):
    """Block totals: `real` tokens, shares called and replaced; replaced tokens' probabilities
    `auc_bucket_gap` buckets above the originals' (0: one bucket, a chance ranking)."""
    pos, neg = np.zeros(BUCKETS), np.zeros(BUCKETS)
    pos[20 + auc_bucket_gap] = replaced * real
    neg[20] = (1 - replaced) * real
    return np.concatenate([[real, called * real, replaced * real], pos, neg])


def _block(sums, steps=200, mlm_loss=6.0):
    return types.SimpleNamespace(steps_applied=steps, metrics={"mlm_loss": mlm_loss},
                                 health_sums=sums)


def _default_run(tmp_path):
    """The checks of a run with every hparam at its default (10000 warm-up steps)."""
    config = PretrainingConfig.from_hparams("m", str(tmp_path), {})
    assert config.health_every_steps == 200 and not config.do_eval
    assert config.eval_every_steps == 0
    monitor = health.Monitor(health.RunFacts.of(config))
    return training_health.HealthChecks(config.health_every_steps, monitor, Writer())


def test_a_stalled_run_with_default_hparams_is_flagged_from_its_training_batches(tmp_path,
                                                                                 caplog):
    checks = _default_run(tmp_path)
    stalled = _sums(called=0.0, replaced=0.147, auc_bucket_gap=0)
    with caplog.at_level(logging.INFO):
        for first in range(0, 10400, 200):  # blocks of iterations_per_loop (200) steps
            checks.after_block(_block(stalled), first, first + 200, lr=5e-4)
        checks.finish(10400, "models/m")
    # Blocks before warm-up + 20 steps are not read; 10000-10200 reaches back into them.
    assert checks.monitor.active == {"disc_stalled": 10400}
    began = [r.getMessage() for r in caplog.records if r.getMessage().startswith(
        "health: disc_stalled since step 10400 (read off the training batches of steps "
        "10201-10400): the discriminator calls almost no token replaced")]
    assert len(began) == 1 and "Try: adam_bias_correction true" in began[0]
    assert "health at the end of training (step 10400): disc_stalled since step 10400" in \
        caplog.text
    written = checks.writer.scalars_written
    assert written["health/disc_stalled"] == [(10400, 1.0)]
    assert written["train/disc_auc_real"] == [(10400, pytest.approx(0.5, abs=0.01))]
    assert written["train/disc_positive_rate"] == [(10400, 0.0)]


def test_a_healthy_run_is_not_flagged_and_its_figures_are_pooled(tmp_path, caplog):
    checks = _default_run(tmp_path)
    healthy = _sums(called=0.08, replaced=0.147, auc_bucket_gap=60)
    with caplog.at_level(logging.INFO):
        for first in range(10200, 10500, 100):  # blocks of 100 steps: a check every 2
            checks.after_block(_block(healthy, steps=100), first, first + 100, lr=5e-4)
        checks.finish(10500, "models/m")
    assert checks.monitor.active == {}
    assert [s for s, _ in checks.writer.scalars_written["train/disc_auc_real"]] == [10400, 10500]
    assert checks.writer.scalars_written["train/disc_auc_real"][0][1] > 0.9
    assert "health at the end of training (step 10500): ok" in caplog.text


def test_a_run_that_ends_in_its_grace_says_it_was_not_checked(tmp_path, caplog):
    checks = _default_run(tmp_path)
    with caplog.at_level(logging.INFO):
        checks.after_block(_block(_sums(0.0, 0.147, 0)), 0, 200, lr=1e-5)
        checks.finish(200, "models/m")
    assert checks.monitor.active == {} and "train/disc_auc_real" not in \
        checks.writer.scalars_written
    assert "the run stopped before step 10020 (warm-up + 20 steps)" in caplog.text


def test_the_held_out_and_the_training_batches_readings_do_not_toggle_a_state():
    """A state either check finds stays until neither does: an eval that reads the
    discriminator as healthy does not clear a stall the training batches still show."""
    monitor = health.Monitor(health.RunFacts(num_train_steps=1000, num_warmup_steps=0))
    stalled = pretrain_metrics.train_health_figures(_sums(0.0, 0.147, 0))
    healthy = pretrain_metrics.train_health_figures(_sums(0.08, 0.147, 60))
    assert monitor.after_training_batches(100, 200, stalled)
    held_out = dict(healthy, masked_lm_loss=5.0, repr_mean_cosine=0.5, repr_min_dim_spread=0.3)
    assert monitor.after_eval(250, held_out) == {"disc_stalled": 200}
    assert monitor.after_training_batches(200, 300, healthy)  # neither finds it now
    assert monitor.active == {}
    # A resumed run's monitor knows the state from its history: not announced again.
    resumed = health.Monitor(monitor.run, [{"global_step": 200, "health": {"disc_stalled": 200}}])
    assert not resumed.after_training_batches(200, 300, stalled)
