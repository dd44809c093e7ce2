"""GLUE metric functions and scorers against values worked out by hand."""
import math

import numpy as np
import pytest

from finetune.classification import classification_metrics as cm


def test_accuracy_and_binary_f1():
    labels, preds = [1, 1, 0, 0, 1], [1, 0, 1, 0, 1]
    assert cm.accuracy(labels, preds) == pytest.approx(3 / 5)
    # tp = 2, predicted positive = 3, gold positive = 3.
    p, r, f1 = cm.precision_recall_f1(labels, preds)
    assert (p, r, f1) == pytest.approx((2 / 3, 2 / 3, 2 / 3))


def test_f1_without_positive_predictions_is_zero():
    assert cm.precision_recall_f1([1, 0, 1], [0, 0, 0]) == (0.0, 0.0, 0.0)


def test_mcc_binary_by_hand():
    # TP 2, TN 2, FP 1, FN 1: (2*2 - 1*1) / sqrt(3*3*3*3) = 1/3.
    labels = [1, 1, 1, 0, 0, 0]
    preds = [1, 1, 0, 0, 0, 1]
    assert cm.matthews_corrcoef(labels, preds) == pytest.approx(1 / 3)
    assert cm.matthews_corrcoef(labels, labels) == pytest.approx(1.0)
    assert cm.matthews_corrcoef(labels, [1 - x for x in labels]) == pytest.approx(-1.0)


def test_mcc_constant_prediction_is_zero():
    # The majority-class model CoLA fine-tuning often collapses to: undefined, reported as 0.
    assert cm.matthews_corrcoef([1, 0, 1, 1], [1, 1, 1, 1]) == 0.0


def test_mcc_multiclass_by_hand():
    # Confusion (gold rows): [[2,0,0],[1,0,1],[0,1,1]]; t=[2,2,2], p=[3,1,2], c=3, s=6.
    # (3*6 - 12) / sqrt((36 - 14) * (36 - 12)) = 6 / sqrt(528).
    labels = [0, 1, 2, 0, 1, 2]
    preds = [0, 2, 1, 0, 0, 2]
    assert cm.matthews_corrcoef(labels, preds) == pytest.approx(6 / math.sqrt(528))


def test_pearson_by_hand():
    # dx = [-1, 0, 1], dy = [-4/3, -1/3, 5/3]: 3 / sqrt(2 * 42/9).
    assert cm.pearson([1, 2, 3], [1, 2, 4]) == pytest.approx(3 / math.sqrt(2 * 42 / 9))
    assert cm.pearson([1, 2, 3], [3, 3, 3]) == 0.0


def test_average_ranks_ties():
    np.testing.assert_allclose(cm.average_ranks([10, 20, 20, 5]), [2, 3.5, 3.5, 1])
    np.testing.assert_allclose(cm.average_ranks([7, 7, 7]), [2, 2, 2])
    np.testing.assert_allclose(cm.average_ranks([0.5, 0.1, 0.3, 0.1, 0.5]),
                               [4.5, 1.5, 3, 1.5, 4.5])


def test_spearman_with_ties_by_hand():
    # ranks x = [1, 2.5, 2.5, 4], y = [1, 3, 2, 4]: 4.5 / sqrt(4.5 * 5).
    assert cm.spearman([1, 2, 2, 3], [1, 3, 2, 4]) == pytest.approx(4.5 / math.sqrt(22.5))
    # Monotone but non-linear: Spearman 1, Pearson below 1.
    x = [1, 2, 3, 4, 5]
    y = [1, 4, 9, 16, 100]
    assert cm.spearman(x, y) == pytest.approx(1.0)
    assert cm.pearson(x, y) < 0.99


def _feed(scorer, labels, preds, key="label_ids", loss=0.5):
    for i, (y, p) in enumerate(zip(labels, preds)):
        scorer.update({key: np.int32(y) if key == "label_ids" else np.float32(y),
                       "predictions": p, "loss": np.float32(loss), "eid": np.int32(i)})
    return dict(scorer.get_results())


def test_scorers_report_percentages_and_loss():
    results = _feed(cm.AccuracyF1Scorer(), [1, 1, 0, 0, 1], [1, 0, 1, 0, 1], loss=0.25)
    assert results["accuracy"] == pytest.approx(60.0)
    assert results["f1"] == pytest.approx(200 / 3)
    assert results["loss"] == pytest.approx(0.25)
    results = _feed(cm.MCCScorer(), [1, 1, 1, 0, 0, 0], [1, 1, 0, 0, 0, 1])
    assert results["mcc"] == pytest.approx(100 / 3)
    results = _feed(cm.RegressionScorer(), [0.2, 0.4, 0.8], [0.2, 0.4, 0.8], key="targets")
    assert results["pearson"] == pytest.approx(100.0)
    assert results["spearman"] == pytest.approx(100.0)
    assert results["mse"] == pytest.approx(0.0, abs=1e-12)


def test_scorer_results_follow_updates():
    scorer = cm.AccuracyScorer()
    _feed(scorer, [1, 0], [1, 0])
    assert dict(scorer.get_results())["accuracy"] == 100.0
    scorer.update({"label_ids": 1, "predictions": 0, "loss": 0.0})
    assert dict(scorer.get_results())["accuracy"] == pytest.approx(200 / 3)
    assert scorer.results_str().startswith("accuracy: 66.67")
