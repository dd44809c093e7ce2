"""SQuAD v2.0 evaluation, computed as the official v2.0 script computes it (our implementation).

Differences from v1.1 (squad_official_eval_v1):
  - gold answers that normalise to "" are dropped; a question left without any (an
    unanswerable one) has the single gold answer "";
  - F1 when either side has no tokens is 1 if both have none, else 0;
  - questions without a prediction are left out (and reported), not scored 0;
  - with no-answer scores ("null odds", higher = more likely unanswerable) a prediction counts
    as "no answer" when its score exceeds `na_prob_thresh`, then scores 1 on an unanswerable
    question and 0 on an answerable one;
  - results are split into HasAns_ / NoAns_ parts, and best_exact / best_f1 give the score at
    the best threshold with the threshold itself (best_*_thresh): questions are sorted by null
    score and the threshold is moved past them one by one (ties included one at a time, as the
    official script does), starting from "everything is no-answer".

    python -m finetune.qa.squad_official_eval dev-v2.0.json preds.json --na-prob-file odds.json
"""
import argparse
import collections
import json
import sys
from typing import Mapping, Sequence

from finetune.qa.squad_official_eval_v1 import normalize_answer

DEFAULT_NA_PROB_THRESH = 1.0  # the official script's default


def get_tokens(text: str) -> list[str]:
    return normalize_answer(text).split() if text else []


def compute_exact(a_gold: str, a_pred: str) -> int:
    return int(normalize_answer(a_gold) == normalize_answer(a_pred))


def compute_f1(a_gold: str, a_pred: str) -> float:
    gold, predicted = get_tokens(a_gold), get_tokens(a_pred)
    if not gold or not predicted:
        return float(gold == predicted)
    shared = sum((collections.Counter(gold) & collections.Counter(predicted)).values())
    if shared == 0:
        return 0.0
    precision, recall = shared / len(predicted), shared / len(gold)
    return 2 * precision * recall / (precision + recall)


def get_raw_scores(gold_answers: Mapping[str, Sequence[str]], predictions: Mapping[str, str]
                   ) -> tuple[dict[str, int], dict[str, float]]:
    """Per-question exact and F1 (max over gold answers), for questions with a prediction."""
    exact, f1 = {}, {}
    for qid, answers in gold_answers.items():
        golds = [a for a in answers if normalize_answer(a)] or [""]
        if qid not in predictions:
            print(f"Missing prediction for {qid}")
            continue
        exact[qid] = max(compute_exact(a, predictions[qid]) for a in golds)
        f1[qid] = max(compute_f1(a, predictions[qid]) for a in golds)
    return exact, f1


def apply_no_ans_threshold(scores: Mapping[str, float], na_probs: Mapping[str, float],
                           qid_to_has_ans: Mapping[str, bool], threshold: float
                           ) -> dict[str, float]:
    return {qid: float(not qid_to_has_ans[qid]) if na_probs[qid] > threshold else s
            for qid, s in scores.items()}


def make_eval_dict(exact: Mapping[str, float], f1: Mapping[str, float],
                   qid_list: Sequence[str] | None = None) -> dict[str, float]:
    qids = list(qid_list) if qid_list else list(exact)
    total = len(qids)
    return {"exact": 100.0 * sum(exact[q] for q in qids) / total,
            "f1": 100.0 * sum(f1[q] for q in qids) / total,
            "total": total}


def find_best_thresh(predictions: Mapping[str, str], scores: Mapping[str, float],
                     na_probs: Mapping[str, float], qid_to_has_ans: Mapping[str, bool]
                     ) -> tuple[float, float]:
    """(best score %, threshold): score when answering exactly the questions with null score
    <= threshold, maximised over thresholds at the questions' null scores (0.0 when answering
    nothing is best)."""
    score = best = sum(1 for has in qid_to_has_ans.values() if not has)
    best_thresh = 0.0
    for qid in sorted(na_probs, key=lambda q: na_probs[q]):  # stable: ties in file order
        if qid not in scores:
            continue
        if qid_to_has_ans[qid]:
            score += scores[qid]
        elif predictions[qid]:
            score -= 1  # a wrong answer replaces a correct "no answer"
        if score > best:
            best, best_thresh = score, na_probs[qid]
    return 100.0 * best / len(scores), best_thresh


def evaluate(gold_answers: Mapping[str, Sequence[str]], predictions: Mapping[str, str],
             na_probs: Mapping[str, float] | None = None,
             na_prob_thresh: float = DEFAULT_NA_PROB_THRESH) -> dict[str, float]:
    """gold_answers: question id -> answer texts ([] = unanswerable), in file order;
    predictions: id -> text; na_probs: id -> null score (None: all 0, no best_* keys)."""
    qid_to_has_ans = {qid: bool(answers) for qid, answers in gold_answers.items()}
    has_ans = [q for q, has in qid_to_has_ans.items() if has]
    no_ans = [q for q, has in qid_to_has_ans.items() if not has]
    exact_raw, f1_raw = get_raw_scores(gold_answers, predictions)
    probs = na_probs if na_probs is not None else {q: 0.0 for q in predictions}
    exact = apply_no_ans_threshold(exact_raw, probs, qid_to_has_ans, na_prob_thresh)
    f1 = apply_no_ans_threshold(f1_raw, probs, qid_to_has_ans, na_prob_thresh)
    results = make_eval_dict(exact, f1)
    for prefix, qids in (("HasAns", has_ans), ("NoAns", no_ans)):
        if qids:
            for key, value in make_eval_dict(exact, f1, qids).items():
                results[f"{prefix}_{key}"] = value
    if na_probs is not None:
        results["best_exact"], results["best_exact_thresh"] = find_best_thresh(
            predictions, exact_raw, na_probs, qid_to_has_ans)
        results["best_f1"], results["best_f1_thresh"] = find_best_thresh(
            predictions, f1_raw, na_probs, qid_to_has_ans)
    return results


def gold_from_dataset(articles: Sequence[dict]) -> dict[str, list[str]]:
    return {qa["id"]: [a["text"] for a in qa["answers"]]
            for article in articles for paragraph in article["paragraphs"]
            for qa in paragraph["qas"]}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Evaluation for SQuAD 2.0")
    parser.add_argument("data_file")
    parser.add_argument("pred_file")
    parser.add_argument("--out-file", "-o")
    parser.add_argument("--na-prob-file", "-n")
    parser.add_argument("--na-prob-thresh", "-t", type=float, default=DEFAULT_NA_PROB_THRESH)
    args = parser.parse_args(argv)
    with open(args.data_file, encoding="utf-8") as f:
        gold = gold_from_dataset(json.load(f)["data"])
    with open(args.pred_file, encoding="utf-8") as f:
        predictions = json.load(f)
    na_probs = None
    if args.na_prob_file:
        with open(args.na_prob_file, encoding="utf-8") as f:
            na_probs = json.load(f)
    results = evaluate(gold, predictions, na_probs, args.na_prob_thresh)
    if args.out_file:
        with open(args.out_file, "w", encoding="utf-8") as f:
            json.dump(results, f)
    else:
        print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
