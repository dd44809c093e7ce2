"""Evaluation metrics of pre-training, with the official definitions.

`batch_sums(outputs)` turns one batch's PretrainingOutput into additive float sums (they can be
added over batches and replicas); `finalize(sums)` turns the totals into

    masked_lm_accuracy, masked_lm_loss            (weighted by masked_lm_weights)
    sampled_masked_lm_accuracy                    (the generator's samples vs the originals)
    disc_loss                                     (mean of per-example losses)
    disc_auc                                      (tf.compat.v1.metrics.auc, 200 thresholds)
    disc_accuracy, disc_precision, disc_recall    (over real tokens)
    loss                                          (mean total loss per batch)

and, beyond the official ones, for the run's health checks (pretrain/health.py):

    disc_auc_real        the same AUC over real tokens only (padding left out), so chance is 0.5
    disc_replaced_rate   share of real tokens the generator replaced (the base rate)
    disc_positive_rate   share of real tokens the discriminator calls replaced

disc_auc follows the official call exactly: labels and probabilities are multiplied by the input
mask and no weights are passed, so padding positions count as negatives predicted at 0.

The training step adds `train_health_sums(outputs)` to its own metric sums (a vector of
TRAIN_HEALTH_SUMS: counts over real tokens and the real-token AUC histograms, from the
discriminator outputs the step computes anyway), and `train_health_figures(sums)` turns a block's
totals into the same three health figures, read off the training batches between evals.
"""
import numpy as np
import tensorflow as tf

NUM_THRESHOLDS = 200
_KEPSILON = 1e-7
# tf.compat.v1.metrics.auc's thresholds: -eps, 1/199, ..., 198/199, 1 + eps.
THRESHOLDS = np.array([0.0 - _KEPSILON] + [(i + 1) / (NUM_THRESHOLDS - 1)
                                           for i in range(NUM_THRESHOLDS - 2)]
                      + [1.0 + _KEPSILON], np.float32)

SCALARS = ("batches", "loss", "mlm_correct", "mlm_weight", "mlm_loss_sum", "sampled_correct",
           "disc_examples", "disc_example_loss_sum", "disc_correct", "disc_weight",
           "disc_tp", "disc_pred_pos", "disc_label_pos")


def batch_sums(out) -> dict:
    """Additive sums of one batch: float32 scalars, plus auc_pos/auc_neg histograms [201]."""
    f32 = lambda t: tf.cast(t, tf.float32)  # noqa: E731
    w = out.masked_lm_weights
    sums = {
        "batches": tf.constant(1.0),
        "loss": f32(out.total_loss),
        "mlm_correct": tf.reduce_sum(w * f32(tf.equal(out.masked_lm_preds, out.masked_lm_ids))),
        "mlm_weight": tf.reduce_sum(w),
        "mlm_loss_sum": tf.reduce_sum(w * out.masked_lm_example_loss),
    }
    if out.disc_probs is not None:
        mask = f32(out.input_mask)
        labels, preds = out.disc_labels, out.disc_preds
        correct = f32(tf.equal(labels, preds))
        sums.update({
            "sampled_correct": tf.reduce_sum(w * f32(tf.equal(out.sampled_ids,
                                                              out.masked_lm_ids))),
            "disc_examples": f32(tf.shape(out.disc_example_loss)[0]),
            "disc_example_loss_sum": tf.reduce_sum(out.disc_example_loss),
            "disc_correct": tf.reduce_sum(correct * mask),
            "disc_weight": tf.reduce_sum(mask),
            "disc_tp": tf.reduce_sum(correct * f32(preds) * mask),
            "disc_pred_pos": tf.reduce_sum(f32(preds) * mask),
            "disc_label_pos": tf.reduce_sum(f32(labels) * mask),
        })
        # Official: auc(labels * input_mask, probs * input_mask), unweighted.
        auc_labels = tf.reshape(labels * out.input_mask, [-1]) > 0
        auc_probs = tf.reshape(out.disc_probs * mask, [-1])
        bucket = thresholds_below(auc_probs)
        num_buckets = NUM_THRESHOLDS + 1
        sums["auc_pos"] = tf.math.unsorted_segment_sum(f32(auc_labels), bucket, num_buckets)
        sums["auc_neg"] = tf.math.unsorted_segment_sum(f32(~auc_labels), bucket, num_buckets)
        real = tf.reshape(out.input_mask, [-1]) > 0
        sums["auc_real_pos"] = tf.math.unsorted_segment_sum(
            f32(auc_labels & real), bucket, num_buckets)
        sums["auc_real_neg"] = tf.math.unsorted_segment_sum(
            f32(~auc_labels & real), bucket, num_buckets)
    return sums


def thresholds_below(probs: tf.Tensor) -> tf.Tensor:
    """int32: how many THRESHOLDS lie below each probability (its AUC histogram bucket)."""
    return tf.searchsorted(tf.constant(THRESHOLDS), probs, side="left")


# The training step's histogram buckets: those of THRESHOLDS that a probability in [0, 1] can
# fall in (1 .. NUM_THRESHOLDS - 1 thresholds below it).
_TRAIN_BUCKETS = NUM_THRESHOLDS - 1
TRAIN_HEALTH_SUMS = ("disc_real", "disc_pred_pos", "disc_label_pos") + tuple(
    f"auc_real_{kind}_{b}" for kind in ("pos", "neg") for b in range(_TRAIN_BUCKETS))


def train_health_sums(out) -> tf.Tensor:
    """float32 [len(TRAIN_HEALTH_SUMS)]: one training micro-batch's real tokens, those called
    replaced and those replaced, and its real-token AUC histograms. Read from the outputs the
    step has computed; adds no randomness and changes none of its values."""
    mask = tf.reshape(tf.cast(out.input_mask, tf.float32), [-1])
    labels = tf.reshape(tf.cast(out.disc_labels, tf.float32), [-1]) * mask
    preds = tf.reshape(tf.cast(out.disc_preds, tf.float32), [-1]) * mask
    probs = tf.reshape(tf.cast(out.disc_probs, tf.float32), [-1])
    bucket = tf.clip_by_value(thresholds_below(probs), 1, _TRAIN_BUCKETS) - 1
    pos = tf.math.unsorted_segment_sum(labels, bucket, _TRAIN_BUCKETS)
    neg = tf.math.unsorted_segment_sum(mask - labels, bucket, _TRAIN_BUCKETS)
    counts = tf.stack([tf.reduce_sum(mask), tf.reduce_sum(preds), tf.reduce_sum(labels)])
    return tf.concat([counts, pos, neg], 0)


def train_health_figures(sums: np.ndarray) -> dict:
    """Totals of train_health_sums -> disc_auc_real, disc_positive_rate, disc_replaced_rate
    (the names and meanings of the eval's, over the training batches' real tokens)."""
    sums = np.asarray(sums, np.float64)
    real, called, replaced = sums[:3]
    histograms = np.zeros((2, NUM_THRESHOLDS + 1))
    histograms[:, 1:NUM_THRESHOLDS] = sums[3:].reshape(2, _TRAIN_BUCKETS)
    return {"disc_auc_real": auc_from_histograms(histograms[0], histograms[1]),
            "disc_positive_rate": called / real if real else 0.0,
            "disc_replaced_rate": replaced / real if real else 0.0}


def auc_from_histograms(pos: np.ndarray, neg: np.ndarray) -> float:
    """ROC AUC as tf.compat.v1.metrics.auc computes it (trapezoids over 200 thresholds).

    pos/neg[b]: counts of positives/negatives with exactly b thresholds below their prediction.
    """
    pos, neg = np.asarray(pos, np.float64), np.asarray(neg, np.float64)
    # Count above threshold t = entries in buckets t+1 .. 200.
    tp = np.cumsum(pos[::-1])[::-1][1:]
    fp = np.cumsum(neg[::-1])[::-1][1:]
    fn, tn = pos.sum() - tp, neg.sum() - fp
    epsilon = 1.0e-6
    recall = (tp + epsilon) / (tp + fn + epsilon)
    fp_rate = fp / (fp + tn + epsilon)
    return float(np.sum((fp_rate[:-1] - fp_rate[1:]) * (recall[:-1] + recall[1:]) / 2.0))


def finalize(sums: dict) -> dict:
    """Totals of batch_sums -> the metric dict (floats)."""
    s = {k: float(np.asarray(v)) for k, v in sums.items() if not k.startswith("auc_")}
    div = lambda a, b: a / b if b else 0.0  # noqa: E731
    metrics = {
        "loss": div(s["loss"], s["batches"]),
        "masked_lm_accuracy": div(s["mlm_correct"], s["mlm_weight"]),
        "masked_lm_loss": div(s["mlm_loss_sum"], s["mlm_weight"]),
    }
    if "disc_weight" in s:
        metrics.update({
            "sampled_masked_lm_accuracy": div(s["sampled_correct"], s["mlm_weight"]),
            "disc_loss": div(s["disc_example_loss_sum"], s["disc_examples"]),
            "disc_auc": auc_from_histograms(sums["auc_pos"], sums["auc_neg"]),
            "disc_accuracy": div(s["disc_correct"], s["disc_weight"]),
            "disc_precision": div(s["disc_tp"], s["disc_pred_pos"]),
            "disc_recall": div(s["disc_tp"], s["disc_label_pos"]),
            "disc_auc_real": auc_from_histograms(sums["auc_real_pos"], sums["auc_real_neg"]),
            "disc_replaced_rate": div(s["disc_label_pos"], s["disc_weight"]),
            "disc_positive_rate": div(s["disc_pred_pos"], s["disc_weight"]),
        })
    return metrics
