"""Eval metrics: AUC equal to tf.compat.v1.metrics.auc, precision/recall/accuracy by hand."""
from types import SimpleNamespace

import numpy as np
import tensorflow as tf

from pretrain import pretrain_metrics


def _v1_auc(labels, predictions):
    graph = tf.Graph()
    with graph.as_default():
        auc, update = tf.compat.v1.metrics.auc(tf.constant(labels), tf.constant(predictions))
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.local_variables_initializer())
            sess.run(update)
            return float(sess.run(auc))


def _outputs(rs, batch=4, length=10, n=3):
    mask = (np.arange(length)[None] < rs.randint(3, length + 1, size=[batch, 1])).astype(np.int32)
    labels = (rs.rand(batch, length) < 0.3).astype(np.int32) * mask
    probs = np.clip(0.6 * labels + 0.5 * rs.rand(batch, length), 0, 1).astype(np.float32)
    probs[0, 0] = 0.5  # exactly on a threshold
    preds = (probs > 0.5).astype(np.int32)
    ids = rs.randint(0, 5, size=[batch, n]).astype(np.int32)
    return SimpleNamespace(
        total_loss=np.float32(2.0), masked_lm_weights=(rs.rand(batch, n) < 0.8).astype(np.float32),
        masked_lm_ids=ids, masked_lm_preds=rs.randint(0, 5, size=[batch, n]).astype(np.int32),
        masked_lm_example_loss=rs.rand(batch, n).astype(np.float32),
        sampled_ids=rs.randint(0, 5, size=[batch, n]).astype(np.int32),
        disc_probs=probs, disc_preds=preds, disc_labels=labels,
        disc_example_loss=rs.rand(batch).astype(np.float32), input_mask=mask)


def test_metrics_match_the_official_definitions():
    rs = np.random.RandomState(0)
    batches = [_outputs(rs) for _ in range(3)]
    totals = {}
    for out in batches:
        for k, v in pretrain_metrics.batch_sums(out).items():
            totals[k] = totals.get(k, 0.0) + np.asarray(v, np.float64)
    metrics = pretrain_metrics.finalize(totals)

    cat = lambda name: np.concatenate([getattr(b, name) for b in batches])  # noqa: E731
    mask, labels, preds = cat("input_mask"), cat("disc_labels"), cat("disc_preds")
    w = cat("masked_lm_weights")
    expected_auc = _v1_auc((labels * mask).astype(bool), cat("disc_probs") * mask)
    np.testing.assert_allclose(metrics["disc_auc"], expected_auc, rtol=1e-5)
    m = mask.astype(bool)
    np.testing.assert_allclose(metrics["disc_accuracy"], (labels == preds)[m].mean())
    np.testing.assert_allclose(metrics["disc_precision"], labels[m & (preds == 1)].mean())
    np.testing.assert_allclose(metrics["disc_recall"], preds[m & (labels == 1)].mean())
    np.testing.assert_allclose(metrics["disc_loss"], cat("disc_example_loss").mean(), rtol=1e-6)
    np.testing.assert_allclose(metrics["masked_lm_accuracy"],
                               (w * (cat("masked_lm_preds") == cat("masked_lm_ids"))).sum() / w.sum())
    np.testing.assert_allclose(metrics["sampled_masked_lm_accuracy"],
                               (w * (cat("sampled_ids") == cat("masked_lm_ids"))).sum() / w.sum())
    np.testing.assert_allclose(metrics["masked_lm_loss"],
                               (w * cat("masked_lm_example_loss")).sum() / w.sum(), rtol=1e-6)
    assert metrics["loss"] == 2.0
    # The health checks' additions: the AUC over real tokens, the base rate, the positive rate.
    np.testing.assert_allclose(metrics["disc_auc_real"],
                               _v1_auc(labels[m].astype(bool), cat("disc_probs")[m]), rtol=1e-5)
    np.testing.assert_allclose(metrics["disc_replaced_rate"], labels[m].mean())
    np.testing.assert_allclose(metrics["disc_positive_rate"], preds[m].mean())


def test_auc_extremes():
    perfect = pretrain_metrics.auc_from_histograms(
        np.bincount([200, 150], minlength=201), np.bincount([3, 10, 50], minlength=201))
    assert perfect > 0.99
    useless = pretrain_metrics.auc_from_histograms(
        np.bincount([100, 100], minlength=201), np.bincount([100, 100], minlength=201))
    np.testing.assert_allclose(useless, 0.5, atol=1e-3)
