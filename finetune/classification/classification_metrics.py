"""GLUE metrics in numpy (no scipy/sklearn) and the scorers of classification/regression tasks.

Definitions as GLUE uses them: CoLA Matthews correlation; STS-B Pearson and Spearman (average
ranks for ties); MRPC and QQP accuracy and F1 of the positive class "1"; the rest accuracy.
Scorers report them x100, as the official release does.
"""
from typing import Any, Mapping, Sequence

import numpy as np

from finetune import health, scorer


# -- metric functions ---------------------------------------------------------------------------


def accuracy(labels, predictions) -> float:
    labels, predictions = np.asarray(labels), np.asarray(predictions)
    if labels.size == 0:
        return 0.0
    return float(np.mean(labels == predictions))


def precision_recall_f1(labels, predictions, positive=1) -> tuple[float, float, float]:
    """Binary precision, recall and F1 of class `positive` (0 when undefined, as sklearn)."""
    labels, predictions = np.asarray(labels), np.asarray(predictions)
    tp = float(np.sum((predictions == positive) & (labels == positive)))
    n_pred = float(np.sum(predictions == positive))
    n_gold = float(np.sum(labels == positive))
    precision = tp / n_pred if n_pred else 0.0
    recall = tp / n_gold if n_gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return precision, recall, f1


def matthews_corrcoef(labels, predictions) -> float:
    """Matthews correlation, multi-class form (Gorodkin 2004); 0 when undefined (as sklearn).

    With confusion matrix C (rows gold, columns predicted), t = row sums, p = column sums,
    c = trace, s = total:  (c*s - t.p) / sqrt((s^2 - p.p) * (s^2 - t.t)).
    """
    labels, predictions = np.asarray(labels), np.asarray(predictions)
    classes, encoded = np.unique(np.concatenate([labels, predictions]), return_inverse=True)
    k = len(classes)
    gold, pred = encoded[:labels.size], encoded[labels.size:]
    confusion = np.zeros((k, k), np.float64)
    np.add.at(confusion, (gold, pred), 1.0)
    t, p = confusion.sum(axis=1), confusion.sum(axis=0)
    c, s = np.trace(confusion), confusion.sum()
    denominator = np.sqrt((s * s - p @ p) * (s * s - t @ t))
    if denominator == 0:
        return 0.0
    return float((c * s - t @ p) / denominator)


def pearson(x, y) -> float:
    """Pearson correlation; 0 when either side is constant (undefined there)."""
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    dx, dy = x - x.mean(), y - y.mean()
    denominator = np.sqrt(np.sum(dx * dx) * np.sum(dy * dy))
    if denominator == 0:
        return 0.0
    return float(np.sum(dx * dy) / denominator)


def average_ranks(x) -> np.ndarray:
    """1-based ranks; tied values share the average of the ranks they span (scipy's rankdata)."""
    x = np.asarray(x)
    order = np.argsort(x, kind="mergesort")
    sorted_x = x[order]
    # Boundaries of runs of equal values in sorted order.
    new_run = np.concatenate([[True], sorted_x[1:] != sorted_x[:-1]])
    run_id = np.cumsum(new_run) - 1
    starts = np.flatnonzero(new_run)
    ends = np.concatenate([starts[1:], [x.size]])  # exclusive
    run_rank = (starts + 1 + ends) / 2.0  # mean of ranks starts+1 .. ends
    ranks = np.empty(x.size, np.float64)
    ranks[order] = run_rank[run_id]
    return ranks


def spearman(x, y) -> float:
    """Spearman correlation: Pearson of the average ranks."""
    return pearson(average_ranks(x), average_ranks(y))


# -- scorers ------------------------------------------------------------------------------------


class SentenceLevelScorer(scorer.Scorer):
    """Collects gold labels ("label_ids" or "targets") and "predictions", one per example.
    label_names: the task's labels by class id, for messages (None: regression, or unknown)."""

    def __init__(self, label_names: Sequence[str] | None = None):
        super().__init__()
        self._label_names = list(label_names) if label_names is not None else None
        self._true_labels: list[Any] = []
        self._preds: list[Any] = []
        self._eids: list[int] = []

    def update(self, results: Mapping[str, Any]) -> None:
        super().update(results)
        gold = results["label_ids"] if "label_ids" in results else results["targets"]
        self._true_labels.append(np.asarray(gold).item())
        self._preds.append(np.asarray(results["predictions"]).item())
        self._eids.append(int(np.asarray(results.get("eid", -1)).item()))

    def collapse(self) -> str | None:
        return health.classification_collapse(self._preds, self._true_labels, self._label_names)


class AccuracyScorer(SentenceLevelScorer):

    def _get_results(self):
        return [("accuracy", 100.0 * accuracy(self._true_labels, self._preds)),
                ("loss", self.get_loss())]


class AccuracyF1Scorer(SentenceLevelScorer):
    """MRPC and QQP: accuracy and F1 of the positive class (GLUE reports both)."""

    def __init__(self, positive_label: int = 1, label_names: Sequence[str] | None = None):
        super().__init__(label_names)
        self._positive = positive_label

    def _get_results(self):
        p, r, f1 = precision_recall_f1(self._true_labels, self._preds, self._positive)
        return [("accuracy", 100.0 * accuracy(self._true_labels, self._preds)),
                ("f1", 100.0 * f1), ("precision", 100.0 * p), ("recall", 100.0 * r),
                ("loss", self.get_loss())]


class MCCScorer(SentenceLevelScorer):

    def _get_results(self):
        return [("mcc", 100.0 * matthews_corrcoef(self._true_labels, self._preds)),
                ("accuracy", 100.0 * accuracy(self._true_labels, self._preds)),
                ("loss", self.get_loss())]


class RegressionScorer(SentenceLevelScorer):
    """STS-B: Pearson and Spearman between gold and predicted scores (both in the same units),
    or the one of them `metrics` names; then the mean squared error and the loss."""

    def __init__(self, metrics=("pearson", "spearman")):
        super().__init__()
        self._metrics = list(metrics)

    def _get_results(self):
        gold = np.asarray(self._true_labels, np.float64)
        preds = np.asarray(self._preds, np.float64)
        functions = {"pearson": pearson, "spearman": spearman}
        return [(m, 100.0 * functions[m](gold, preds)) for m in self._metrics] + [
            ("mse", float(np.mean(np.square(gold - preds))) if gold.size else 0.0),
            ("loss", self.get_loss())]

    def collapse(self) -> str | None:
        return health.regression_collapse(self._preds, self._true_labels)


def macro_f1(labels, predictions, num_labels: int) -> float:
    """Unweighted mean over classes of each class's F1 (multi-class F1)."""
    return float(np.mean([precision_recall_f1(labels, predictions, c)[2]
                          for c in range(num_labels)]))


class ChosenMetricsScorer(SentenceLevelScorer):
    """The metrics a custom classification task asks for (accuracy, f1, mcc), then the loss.

    f1 is the positive class's for two labels (as MRPC/QQP) and the macro average otherwise.
    """

    def __init__(self, metrics, num_labels: int, positive_label: int = 1,
                 label_names: Sequence[str] | None = None):
        super().__init__(label_names)
        self._metrics = list(metrics)
        self._num_labels = num_labels
        self._positive = positive_label

    def _get_results(self):
        gold, preds = self._true_labels, self._preds
        results = []
        for metric in self._metrics:
            if metric == "accuracy":
                results.append(("accuracy", 100.0 * accuracy(gold, preds)))
            elif metric == "mcc":
                results.append(("mcc", 100.0 * matthews_corrcoef(gold, preds)))
            elif self._num_labels == 2:
                p, r, f1 = precision_recall_f1(gold, preds, self._positive)
                results += [("f1", 100.0 * f1), ("precision", 100.0 * p), ("recall", 100.0 * r)]
            else:
                results.append(("macro_f1", 100.0 * macro_f1(gold, preds, self._num_labels)))
        return results + [("loss", self.get_loss())]
