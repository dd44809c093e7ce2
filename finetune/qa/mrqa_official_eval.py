"""MRQA 2019 shared-task evaluation, computed as the official MRQA script computes it.

The MRQA script is the SQuAD v1.1 one (same normalisation, exact match and F1, maximum over the
gold answers) applied to JSONL files: the gold answers of a question are its "answers" list
(raw answer strings), keyed by "qid"; the first line may be a header. A question without a
prediction scores 0, or is left out with skip_no_answer (how the ELECTRA release calls it).

    python -m finetune.qa.mrqa_official_eval dev.jsonl.gz predictions.json
"""
import argparse
import gzip
import json
import sys
from typing import Mapping, Sequence

from finetune.qa.squad_official_eval_v1 import (exact_match_score, f1_score,
                                                metric_max_over_ground_truths)


def read_answers(gold_file: str) -> dict[str, list[str]]:
    answers = {}
    opener = gzip.open if gold_file.endswith(".gz") else open
    with opener(gold_file, "rt", encoding="utf-8") as f:
        for i, line in enumerate(f):
            example = json.loads(line)
            if i == 0 and "header" in example:
                continue
            for qa in example["qas"]:
                answers[qa["qid"]] = qa["answers"]
    return answers


def evaluate(answers: Mapping[str, Sequence[str]], predictions: Mapping[str, str],
             skip_no_answer: bool = False) -> dict[str, float]:
    """{"exact_match": %, "f1": %}; answers: qid -> gold answer texts."""
    exact = f1 = 0.0
    total = 0
    for qid, ground_truths in answers.items():
        if qid not in predictions:
            if not skip_no_answer:
                print(f"Unanswered question {qid} will receive score 0.")
                total += 1
            continue
        total += 1
        exact += metric_max_over_ground_truths(exact_match_score, predictions[qid],
                                               ground_truths)
        f1 += metric_max_over_ground_truths(f1_score, predictions[qid], ground_truths)
    return {"exact_match": 100.0 * exact / total, "f1": 100.0 * f1 / total}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Evaluation for MRQA Workshop Shared Task")
    parser.add_argument("dataset_file")
    parser.add_argument("prediction_file")
    parser.add_argument("--skip-no-answer", action="store_true")
    args = parser.parse_args(argv)
    with open(args.prediction_file, encoding="utf-8") as f:
        predictions = json.load(f)
    print(json.dumps(evaluate(read_answers(args.dataset_file), predictions,
                              args.skip_no_answer)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
