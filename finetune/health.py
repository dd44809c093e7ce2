"""Collapsed fine-tuning trials: dev predictions that carry no information about the input.

A trial that predicts one class for every dev example, one regression value, `O` for every word
or no answer for any question scores like the trivial baseline and says nothing about its
initialisation. The scorers ask these functions for a reason (None: not collapsed); the trial's
record and the run summary flag it (run_finetuning.py), and the median still counts it.

A dev set whose gold answers are themselves all one class (one value, one tag, no answerable
question) cannot tell a collapsed trial from a perfect one: a trial that gets every example of
such a set right is not flagged. Messages name labels as the task's data spells them.
"""
from typing import Iterable, Sequence

import numpy as np

OUTSIDE = "O"


def classification_collapse(predictions: Sequence, gold: Sequence,
                            label_names: Sequence[str] | None = None) -> str | None:
    """Every prediction the same class (class ids; `label_names[id]` names them), unless
    every gold label is that class too."""
    classes = set(np.asarray(predictions).tolist())
    if len(predictions) < 2 or len(classes) != 1:
        return None
    only = classes.pop()
    if set(np.asarray(gold).tolist()) == {only}:
        return None  # a one-class dev set, predicted right
    if label_names is None:
        return f"every dev prediction is class {only}"
    return f"every dev prediction is {label_names[int(only)]!r}"


def regression_collapse(predictions: Sequence[float], gold: Sequence[float]) -> str | None:
    """Predictions (nearly) constant: their spread below 1% of the gold values' spread, or, where
    every gold value is the same, a constant that is not that value (off by over 1% of it)."""
    preds, gold = np.asarray(predictions, np.float64), np.asarray(gold, np.float64)
    if preds.size < 2:
        return None
    if gold.std() == 0:
        if preds.std() == 0 and np.all(np.abs(preds - gold) > 0.01 * max(abs(gold[0]), 1e-12)):
            return f"every dev prediction is {preds[0]:.3g} (every gold value is {gold[0]:.3g})"
        return None
    if preds.std() <= 0.01 * gold.std():
        return f"every dev prediction is about {preds.mean():.3g} (spread {preds.std():.2g})"
    return None


def tagging_collapse(predicted_tags: Iterable[Sequence[str]],
                     gold_tags: Iterable[Sequence[str]]) -> str | None:
    """Every word given the same tag (all `O` for chunking), unless every gold tag is that tag."""
    tags = {tag for sentence in predicted_tags for tag in sentence}
    if len(tags) != 1:
        return None
    only = tags.pop()
    if {tag for sentence in gold_tags for tag in sentence} == {only}:
        return None
    return f"every dev word is tagged {only!r}"


def qa_collapse(answers: Iterable[str], answerable: Iterable[bool] | None = None) -> str | None:
    """No answer anywhere: every question left unanswered (empty text; for SQuAD 2.0 the answers
    given, after the null threshold), unless no dev question has an answer (`answerable`: one
    flag per question, None: unknown)."""
    answers = list(answers)
    if not answers or any(a.strip() for a in answers):
        return None
    if answerable is not None and not any(answerable):
        return None  # a dev set of unanswerable questions, answered right
    return "no dev question gets an answer"
