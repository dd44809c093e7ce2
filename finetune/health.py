"""Collapsed fine-tuning trials: dev predictions that carry no information about the input.

A trial that predicts one class for every dev example, one regression value, `O` for every word
or no answer for any question scores like the trivial baseline and says nothing about its
initialisation. The scorers ask these functions for a reason (None: not collapsed); the trial's
record and the run summary flag it (run_finetuning.py), and the median still counts it.
"""
from typing import Iterable, Sequence

import numpy as np

OUTSIDE = "O"


def classification_collapse(predictions: Sequence) -> str | None:
    """Every prediction the same class."""
    classes = set(np.asarray(predictions).tolist())
    if len(predictions) > 1 and len(classes) == 1:
        return f"every dev prediction is class {classes.pop()}"
    return None


def regression_collapse(predictions: Sequence[float], gold: Sequence[float]) -> str | None:
    """Predictions (nearly) constant: their spread below 1% of the gold values' spread."""
    preds, gold = np.asarray(predictions, np.float64), np.asarray(gold, np.float64)
    if preds.size < 2:
        return None
    if preds.std() <= 0.01 * max(gold.std(), 1e-12):
        return f"every dev prediction is about {preds.mean():.3g} (spread {preds.std():.2g})"
    return None


def tagging_collapse(predicted_tags: Iterable[Sequence[str]]) -> str | None:
    """Every word given the same tag (all `O` for chunking)."""
    tags = {tag for sentence in predicted_tags for tag in sentence}
    if len(tags) == 1:
        return f"every dev word is tagged {tags.pop()}"
    return None


def qa_collapse(answers: Iterable[str]) -> str | None:
    """No answer anywhere: every question predicted unanswerable (or empty)."""
    answers = list(answers)
    if answers and not any(a.strip() for a in answers):
        return "no dev question gets an answer"
    return None
