"""SQuAD v1.1 evaluation, computed as the official v1.1 script computes it (our implementation).

Answers are normalised (lower case, punctuation removed, the articles a/an/the removed, runs of
whitespace collapsed). Exact match: normalised strings equal. F1: over the bags of normalised
tokens; 0 when no token is shared (so also when either side normalises to nothing). A question
scores the maximum over its gold answers; a question without a prediction scores 0. Both are
averaged over all questions and reported as percentages.

    python -m finetune.qa.squad_official_eval_v1 dev-v1.1.json predictions.json
"""
import argparse
import collections
import json
import re
import string
import sys
from typing import Callable, Mapping, Sequence

_PUNCTUATION = frozenset(string.punctuation)  # ASCII punctuation only, as the official script
_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)


def normalize_answer(text: str) -> str:
    """Lower-case, drop ASCII punctuation, drop a/an/the, collapse whitespace (in that order)."""
    text = "".join(c for c in text.lower() if c not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match_score(prediction: str, ground_truth: str) -> bool:
    return normalize_answer(prediction) == normalize_answer(ground_truth)


def f1_score(prediction: str, ground_truth: str) -> float:
    predicted = normalize_answer(prediction).split()
    gold = normalize_answer(ground_truth).split()
    shared = sum((collections.Counter(predicted) & collections.Counter(gold)).values())
    if shared == 0:
        return 0.0
    precision, recall = shared / len(predicted), shared / len(gold)
    return 2 * precision * recall / (precision + recall)


def metric_max_over_ground_truths(metric: Callable[[str, str], float], prediction: str,
                                  ground_truths: Sequence[str]) -> float:
    return max(metric(prediction, gold) for gold in ground_truths)


def evaluate(gold_answers: Mapping[str, Sequence[str]],
             predictions: Mapping[str, str]) -> dict[str, float]:
    """gold_answers: question id -> its answer texts (at least one); predictions: id -> text.

    Returns {"exact_match": %, "f1": %} over every question of gold_answers.
    """
    exact = f1 = 0.0
    for qid, ground_truths in gold_answers.items():
        if qid not in predictions:
            print(f"Unanswered question {qid} will receive score 0.", file=sys.stderr)
            continue
        exact += metric_max_over_ground_truths(exact_match_score, predictions[qid],
                                               ground_truths)
        f1 += metric_max_over_ground_truths(f1_score, predictions[qid], ground_truths)
    total = len(gold_answers)
    return {"exact_match": 100.0 * exact / total, "f1": 100.0 * f1 / total}


def gold_from_dataset(articles: Sequence[dict]) -> dict[str, list[str]]:
    """The official file's "data" list -> question id -> answer texts."""
    return {qa["id"]: [a["text"] for a in qa["answers"]]
            for article in articles for paragraph in article["paragraphs"]
            for qa in paragraph["qas"]}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Evaluation for SQuAD 1.1")
    parser.add_argument("dataset_file")
    parser.add_argument("prediction_file")
    args = parser.parse_args(argv)
    with open(args.dataset_file, encoding="utf-8") as f:
        dataset = json.load(f)
    if dataset.get("version") != "1.1":
        print(f"Evaluation expects v-1.1, but got dataset with v-{dataset.get('version')}",
              file=sys.stderr)
    with open(args.prediction_file, encoding="utf-8") as f:
        predictions = json.load(f)
    print(json.dumps(evaluate(gold_from_dataset(dataset["data"]), predictions)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
