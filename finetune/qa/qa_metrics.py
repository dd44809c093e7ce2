"""From the QA head's per-window outputs to answer texts, output files and official metrics.

Per question (as the ELECTRA release):
  1. candidates from every window: with joint_prediction the beam (start k, its end j) pairs
     scored start_top_log_probs[k] + end_top_log_probs[k, j]; otherwise the n_best_size best
     starts x best ends scored start_logit + end_logit. Candidates are dropped when a position is
     outside the document part of the window, the start is [CLS], the window is not the start's
     max-context window, end < start, or the span is longer than max_answer_length pieces.
  2. the best candidates (at most n_best_size distinct texts) are turned into text: the pieces
     are joined back into words (WordPiece "##" or SentencePiece "\u2581"), then aligned
     character by character with the original words they came from (get_final_text), so the
     answer keeps the context's casing and accents but not extra characters of the word
     ("Steve Smith's" -> "Steve Smith").
  3. SQuAD 2.0: a null score per question = the smallest answerability logit over its windows
     (the window most sure to hold an answer), or without the answerability classifier
     min(start_logit[CLS] + end_logit[CLS]) minus the best span's score. The prediction is
     "no answer" when null score > threshold: chosen on dev by the evaluation (best_f1_thresh),
     `qa_na_threshold` for test outputs.

Files in config.qa_dir: <task>_preds.json (question id -> best non-null answer, as the official
release writes them for dev), <task>_null_odds.json (2.0), <task>_eval.json (the metrics).
"""
import dataclasses
import logging
import math
import os
from typing import Any, Mapping, Sequence

import numpy as np

import configure_finetuning
from finetune import health
from finetune import scorer as scorer_lib
from finetune.qa import mrqa_official_eval
from finetune.qa import qa_data
from finetune.qa import qa_features
from finetune.qa import squad_official_eval
from finetune.qa import squad_official_eval_v1
from model import tokenization
from util import io_utils

log = logging.getLogger(__name__)

# The prediction of a question without any valid candidate span (as the official release).
EMPTY_PREDICTION = "empty"
# Null score of a question without any window (an empty context): surely "no answer" (the
# official scorer's starting value).
NO_WINDOW_NULL_SCORE = 1e6


@dataclasses.dataclass
class Candidate:
    window: int  # index into the question's windows
    start: int  # positions in that window
    end: int
    start_logit: float
    end_logit: float

    @property
    def score(self) -> float:
        return self.start_logit + self.end_logit


@dataclasses.dataclass
class QuestionPrediction:
    text: str  # the best non-null answer
    nbest: list[dict[str, Any]]  # {"text", "probability", "start_logit", "end_logit"}
    null_score: float | None  # SQuAD 2.0: > threshold means "no answer"; else None
    found: bool = True  # False: no valid span, `text` is the official EMPTY_PREDICTION placeholder


def get_best_indexes(logits: Sequence[float], n_best_size: int) -> list[int]:
    """Indices of the n largest logits, largest first (stable on ties)."""
    order = sorted(range(len(logits)), key=lambda i: logits[i], reverse=True)
    return order[:n_best_size]


def compute_softmax(scores: Sequence[float]) -> list[float]:
    if not scores:
        return []
    top = max(scores)
    exps = [math.exp(s - top) for s in scores]
    total = sum(exps)
    return [e / total for e in exps]


def _strip_spaces(text: str) -> tuple[str, dict[int, int]]:
    """text without spaces, and (index in it) -> index in text."""
    kept, mapping = [], {}
    for i, c in enumerate(text):
        if c != " ":
            mapping[len(kept)] = i
            kept.append(c)
    return "".join(kept), mapping


def get_final_text(pred_text: str, orig_text: str, do_lower_case: bool = True,
                   strip_accents: bool | None = None) -> str:
    """The part of `orig_text` (original words of the span) that `pred_text` (normalised,
    de-tokenised pieces) stands for; `orig_text` itself when the two cannot be aligned.

    Alignment: basic-tokenise orig_text the way the pieces were made, find pred_text in it, and
    map the match back through the space-free versions of both, which must have the same length
    (one-to-one characters; fails e.g. when normalisation changed the number of characters).
    """
    basic = tokenization.BasicTokenizer(do_lower_case=do_lower_case, strip_accents=strip_accents)
    tok_text = " ".join(basic.tokenize(orig_text))
    start = tok_text.find(pred_text)
    if start == -1:
        return orig_text
    end = start + len(pred_text) - 1
    orig_ns, orig_ns_to_s = _strip_spaces(orig_text)
    tok_ns, tok_ns_to_s = _strip_spaces(tok_text)
    if len(orig_ns) != len(tok_ns):
        return orig_text
    tok_s_to_ns = {s: ns for ns, s in tok_ns_to_s.items()}
    if start not in tok_s_to_ns or end not in tok_s_to_ns:
        return orig_text
    orig_start = orig_ns_to_s.get(tok_s_to_ns[start])
    orig_end = orig_ns_to_s.get(tok_s_to_ns[end])
    if orig_start is None or orig_end is None:
        return orig_text
    return orig_text[orig_start:orig_end + 1]


def detokenize(pieces: Sequence[str], sentencepiece: bool = False) -> str:
    """Word pieces -> normalised text: "##" continuations (WordPiece) or "\u2581" word starts
    (SentencePiece) joined back into words, single spaces between words."""
    if sentencepiece:
        text = "".join(pieces).replace("\u2581", " ")
    else:
        text = " ".join(pieces).replace(" ##", "").replace("##", "")
    return " ".join(text.split())


def _candidates(windows: Sequence[qa_features.Window], results: Sequence[Mapping[str, Any]],
                n_best_size: int, max_answer_length: int, joint_prediction: bool
                ) -> list[Candidate]:
    found = []
    for w, (window, result) in enumerate(zip(windows, results)):
        if joint_prediction:
            starts = [int(i) for i in result["start_top_index"]]
            ends_per_start = [[int(j) for j in row] for row in result["end_top_index"]]
        else:
            starts = get_best_indexes(result["start_logits"], n_best_size)
            ends = get_best_indexes(result["end_logits"], n_best_size)
            ends_per_start = [ends] * len(starts)
        n_tokens = len(window.tokens)
        for k, start in enumerate(starts):
            for j, end in enumerate(ends_per_start[k]):
                if start >= n_tokens or end >= n_tokens or start == 0:
                    continue
                if start not in window.token_to_orig_map or end not in window.token_to_orig_map:
                    continue
                if not window.token_is_max_context.get(start, False):
                    continue
                if end < start or end - start + 1 > max_answer_length:
                    continue
                if joint_prediction:
                    start_logit = float(result["start_top_log_probs"][k])
                    end_logit = float(result["end_top_log_probs"][k][j])
                else:
                    start_logit = float(result["start_logits"][start])
                    end_logit = float(result["end_logits"][end])
                found.append(Candidate(w, start, end, start_logit, end_logit))
    # Stable: equal scores keep window / beam order.
    return sorted(found, key=lambda c: c.score, reverse=True)


def predict_question(example: qa_data.QAExample, windows: Sequence[qa_features.Window],
                     results: Sequence[Mapping[str, Any]],
                     config: configure_finetuning.FinetuningConfig, v2: bool,
                     strip_accents: bool | None = None,
                     sentencepiece: bool = False) -> QuestionPrediction:
    """The answer, n-best list and (2.0) null score of one question from its windows' outputs.

    strip_accents / sentencepiece: how the tokenizer made the pieces (for mapping them back).
    """
    nbest, seen = [], set()
    for cand in _candidates(windows, results, config.n_best_size, config.max_answer_length,
                            config.joint_prediction):
        if len(nbest) >= config.n_best_size:
            break
        window = windows[cand.window]
        pred_text = detokenize(window.tokens[cand.start:cand.end + 1], sentencepiece)
        first, last = window.token_to_orig_map[cand.start], window.token_to_orig_map[cand.end]
        orig_text = " ".join(example.doc_tokens[first:last + 1])
        text = get_final_text(pred_text, orig_text, config.do_lower_case, strip_accents)
        if text in seen:
            continue
        seen.add(text)
        nbest.append({"text": text, "start_logit": cand.start_logit,
                      "end_logit": cand.end_logit})
    found = bool(nbest)
    if not nbest:
        nbest.append({"text": EMPTY_PREDICTION, "start_logit": 0.0, "end_logit": 0.0})
    probabilities = compute_softmax([e["start_logit"] + e["end_logit"] for e in nbest])
    for entry, p in zip(nbest, probabilities):
        entry["probability"] = p
    best = next((e for e in nbest if e["text"]), nbest[0])
    null_score = None
    if v2:
        if config.answerable_classifier:
            null_score = min((float(r["answerable_logit"]) for r in results),
                             default=NO_WINDOW_NULL_SCORE)
        else:
            null_score = min((float(r["start_logits"][0]) + float(r["end_logits"][0])
                              for r in results), default=NO_WINDOW_NULL_SCORE
                             ) - best["start_logit"] - best["end_logit"]
    return QuestionPrediction(best["text"], nbest, null_score, found)


def given_answer(question: QuestionPrediction, na_threshold: float) -> str:
    """The answer a question gets: "" without a span, or (SQuAD 2.0) with its null score above
    `na_threshold`; else the best non-null span."""
    if not question.found or (question.null_score is not None
                              and question.null_score > na_threshold):
        return ""
    return question.text


def group_outputs(task_name: str, rows: Sequence[Mapping[str, Any]]) -> dict[int, Any]:
    """Head outputs per feature id (<task>_eid = 1000 * example eid + window index)."""
    by_id = {}
    for row in rows:
        feature_id = int(np.asarray(row["eid"]).item())
        if feature_id in by_id:
            raise ValueError(f"{task_name}: two outputs for feature {feature_id}")
        by_id[feature_id] = row
    return by_id


def official_metrics(task_name: str, v2: bool, mrqa: bool,
                     examples: Sequence[qa_data.QAExample], predictions: Mapping[str, str],
                     null_odds: Mapping[str, float] | None,
                     na_threshold: float) -> dict[str, float]:
    """The official script's results for the questions of `examples`."""
    gold = {e.qas_id: list(e.gold_answers) for e in examples}
    if v2:
        return squad_official_eval.evaluate(gold, predictions, null_odds, na_threshold)
    if mrqa:
        return mrqa_official_eval.evaluate(gold, predictions, skip_no_answer=True)
    return squad_official_eval_v1.evaluate(gold, predictions)


class SpanBasedQAScorer(scorer_lib.Scorer):
    """Collects a split's window outputs; on get_results decodes answers, writes the files and
    returns the official metrics."""

    def __init__(self, config: configure_finetuning.FinetuningConfig, task, split: str,
                 v2: bool):
        super().__init__()
        self._config = config
        self._task = task
        self._split = split
        self._v2 = v2
        self._rows: list[Mapping[str, Any]] = []
        # Once get_results ran: the answers given (2.0: "" where the null score is above
        # qa_na_threshold, as the metrics and prediction outputs read them) and which questions
        # have a gold answer.
        self._answers: list[str] = []
        self._answerable: list[bool] = []

    def update(self, results: Mapping[str, Any]) -> None:
        super().update(results)
        self._rows.append(results)

    def collapse(self) -> str | None:
        self.get_results()
        return health.qa_collapse(self._answers, self._answerable)

    def paths(self) -> dict[str, str]:
        name, qa_dir = self._task.name, self._config.qa_dir
        return {"preds": os.path.join(qa_dir, f"{name}_preds.json"),
                "null_odds": os.path.join(qa_dir, f"{name}_null_odds.json"),
                "eval": os.path.join(qa_dir, f"{name}_eval.json")}

    def _get_results(self) -> list[tuple[str, float]]:
        examples = self._task.get_examples(self._split)
        questions = self._task.predict_questions(examples, self._rows)
        predictions = {qid: q.text for qid, q in questions.items()}
        self._answers = [given_answer(q, self._config.qa_na_threshold)
                         for q in questions.values()]
        self._answerable = [bool(e.gold_answers) for e in examples]
        null_odds = {qid: q.null_score for qid, q in questions.items()} if self._v2 else None
        paths = self.paths()
        io_utils.write_json(paths["preds"], predictions)
        if null_odds is not None:
            io_utils.write_json(paths["null_odds"], null_odds)
        results = official_metrics(self._task.name, self._v2, self._task.is_mrqa, examples,
                                   predictions, null_odds, self._config.qa_na_threshold)
        io_utils.write_json(paths["eval"], results)
        log.info("%s %s: wrote %s", self._task.name, self._split, ", ".join(
            paths[k] for k in ("preds", "null_odds", "eval") if k != "null_odds" or self._v2))
        return sorted((k, float(v)) for k, v in results.items())
