"""Question-answering tasks: SQuAD 1.1 (`squadv1`), SQuAD 2.0 (`squad`) and the MRQA 2019 tasks.

Data: <raw_data_dir>/<task>/<split>.json (SQuAD format) or <split>.jsonl / .jsonl.gz (MRQA
format); SQuAD tasks look for .json first, MRQA tasks for .jsonl first, and the format follows
the file found. See qa_data (reading), qa_features (windows), qa_head (the model) and qa_metrics
(answers, files, metrics).

Each question becomes one feature row per document window; a row's `<task>_eid` is
1000 * question index + window index (as the official release), which the scorer uses to gather
the windows of each question back together. Training rows carry the answer's start/end
positions (0 = [CLS] when the window does not hold the answer) and `<task>_is_impossible`, the
question's (not the window's) answerability label, as the official release.
"""
import logging
import os
from typing import Any, Mapping, Sequence

import configure_finetuning
from finetune import feature_spec
from finetune import task as task_lib
from finetune.qa import qa_data
from finetune.qa import qa_features
from finetune.qa import qa_head
from finetune.qa import qa_metrics
from util import fs, io_utils

log = logging.getLogger(__name__)

WINDOWS_PER_EXAMPLE = 1000  # feature id = WINDOWS_PER_EXAMPLE * eid + window index
MAX_FEATURE_ID = 2 ** 31 - 1  # features are parsed as int32


class QATask(task_lib.Task):
    """A span-extraction QA task (see the module docstring)."""

    is_mrqa = False
    extensions: Sequence[str] = (".json", ".jsonl", ".jsonl.gz")

    def __init__(self, config: configure_finetuning.FinetuningConfig, name: str, tokenizer,
                 v2: bool = False):
        super().__init__(config, name)
        self._tokenizer = tokenizer
        self.v2 = v2
        for key in ("max_query_length", "doc_stride", "n_best_size", "max_answer_length",
                    "beam_size"):
            if getattr(config, key) < 1:
                raise ValueError(f"hparam {key!r} must be >= 1, got {getattr(config, key)!r}")
        self._examples: dict[str, list[qa_data.QAExample]] = {}
        self.reports: dict[str, qa_data.DataReport] = {}
        self._doc_cache: tuple[Any, qa_features.TokenizedDoc | None] = (None, None)

    # -- reading --------------------------------------------------------------------------------

    def split_path(self, split: str) -> str:
        """The first of <split>.json / .jsonl / .jsonl.gz (task order) in the data directory."""
        directory = self.data_dir()
        for ext in self.extensions:
            path = os.path.join(directory, split + ext)
            if fs.isfile(path):
                return path
        present = sorted(fs.listdir(directory))
        raise task_lib.TaskDataError(
            f"task {self.name!r}: no {' or '.join(split + e for e in self.extensions)} in "
            f"{directory} (directory has: {', '.join(present) if present else 'nothing'})")

    def split_files(self, split: str) -> list[str]:
        return [self.split_path(split)]

    @staticmethod
    def is_labeled(split: str) -> bool:
        return not split.startswith("test")

    def v2_hint(self) -> str | None:
        """How to read unanswerable questions, for an error that finds them in v1 data."""
        return None if self.is_mrqa else qa_data.SQUAD2_HINT

    def get_examples(self, split: str) -> list[qa_data.QAExample]:
        if split not in self._examples:
            path = self.split_path(split)
            labeled = self.is_labeled(split)
            if path.endswith(".json"):
                paragraphs = qa_data.iter_squad(path, self.v2, labeled, self.v2_hint())
            else:
                paragraphs = qa_data.iter_mrqa(path, labeled, self.v2, self.v2_hint())
            examples, report = qa_data.build_examples(
                paragraphs, self.name, is_training=split == "train",
                max_examples=self.max_examples(split))
            report.log(f"{self.name} {split} ({path})")
            self._examples[split] = examples
            self.reports[split] = report
        return self._examples[split]

    def cache_key(self) -> dict[str, Any]:
        c = self.config
        return {"v2": self.v2, "max_query_length": c.max_query_length,
                "doc_stride": c.doc_stride, "qa_feature_version": 1}

    # -- featurizing ----------------------------------------------------------------------------

    def get_feature_specs(self) -> list[feature_spec.FeatureSpec]:
        return [feature_spec.FeatureSpec(f"{self.name}_{key}", [])
                for key in ("eid", "start_positions", "end_positions", "is_impossible")]

    def _tokenized_doc(self, example: qa_data.QAExample) -> qa_features.TokenizedDoc:
        # A paragraph's questions share one word list: tokenize it once for all of them.
        words, doc = self._doc_cache
        if words is not example.doc_tokens:
            doc = qa_features.tokenize_doc(example.doc_tokens, self._tokenizer)
            self._doc_cache = (example.doc_tokens, doc)
        return doc

    def windows(self, example: qa_data.QAExample,
                is_training: bool = False) -> list[qa_features.Window]:
        c = self.config
        return qa_features.make_windows(example, self._tokenizer, c.max_seq_length,
                                        c.max_query_length, c.doc_stride, is_training,
                                        self._tokenized_doc(example))

    def featurize(self, example: qa_data.QAExample, is_training: bool,
                  log_example: bool = False) -> list[dict[str, Any]]:
        windows = self.windows(example, is_training)
        if len(windows) > WINDOWS_PER_EXAMPLE or \
                WINDOWS_PER_EXAMPLE * (example.eid + 1) > MAX_FEATURE_ID:
            raise ValueError(
                f"task {self.name} question {example.qas_id} ({example.source}): "
                f"{len(windows)} windows for question number {example.eid} do not fit the "
                f"feature id scheme (< {WINDOWS_PER_EXAMPLE} windows, < "
                f"{MAX_FEATURE_ID // WINDOWS_PER_EXAMPLE} questions); raise doc_stride or "
                "max_seq_length, or split the file")
        if is_training and not windows:
            log.warning("%s question %s: its answer covers no word piece; not used",
                        self.name, example.qas_id)
        features = []
        for window in windows:
            row = qa_features.window_input_ids(window, self._tokenizer, self.config.max_seq_length)
            row["task_id"] = self.task_id()
            row[f"{self.name}_eid"] = WINDOWS_PER_EXAMPLE * example.eid + window.index
            if is_training:
                row[f"{self.name}_start_positions"] = window.start_position
                row[f"{self.name}_end_positions"] = window.end_position
                row[f"{self.name}_is_impossible"] = int(example.is_impossible)
            features.append(row)
            if log_example:
                answer = " ".join(window.tokens[window.start_position:window.end_position + 1])
                log.info("%s question %s window %d:\n  tokens: %s\n  token_to_orig_map: %s\n"
                         "  start/end: %d/%d (%s)%s", self.name, example.qas_id, window.index,
                         " ".join(window.tokens),
                         " ".join(f"{k}:{v}" for k, v in window.token_to_orig_map.items()),
                         window.start_position, window.end_position,
                         answer if is_training else "-",
                         " impossible" if example.is_impossible else "")
        return features

    # -- predictions ----------------------------------------------------------------------------

    def predict_questions(self, examples: Sequence[qa_data.QAExample],
                          rows: Sequence[Mapping[str, Any]]
                          ) -> dict[str, qa_metrics.QuestionPrediction]:
        """Question id -> prediction, from the head's outputs for every window of `examples`."""
        by_id = qa_metrics.group_outputs(self.name, rows)
        strip_accents = getattr(self._tokenizer, "strip_accents", None)
        sentencepiece = getattr(self._tokenizer, "kind", "") == "sentencepiece"
        predictions = {}
        for example in examples:
            windows = self.windows(example)
            try:
                results = [by_id[WINDOWS_PER_EXAMPLE * example.eid + w.index] for w in windows]
            except KeyError:
                raise ValueError(
                    f"task {self.name}: no model output for a window of question "
                    f"{example.qas_id} (the outputs come from other data or settings)") from None
            predictions[example.qas_id] = qa_metrics.predict_question(
                example, windows, results, self.config, self.v2, strip_accents, sentencepiece)
        return predictions

    def prediction_records(self, examples, outputs):
        """{"id", "answer", "probability"} per question; SQuAD 2.0 adds "null_score", and the
        answer is "" when the null score exceeds qa_na_threshold. A question without any valid
        span gets answer "", probability 0 and "no_span": true (the official scorer's
        placeholder text "empty" is kept for the scorer and the SQuAD submission files only)."""
        questions = self.predict_questions(examples, outputs)
        records = []
        for example in examples:
            q = questions[example.qas_id]
            if not q.found:
                record = {"id": example.qas_id, "answer": "", "probability": 0.0,
                          "no_span": True}
                if q.null_score is not None:
                    record["null_score"] = round(float(q.null_score), 6)
                records.append(record)
                continue
            probability = next(e["probability"] for e in q.nbest if e["text"] == q.text)
            record = {"id": example.qas_id, "answer": q.text,
                      "probability": round(float(probability), 6)}
            if q.null_score is not None:
                if q.null_score > self.config.qa_na_threshold:
                    record["answer"] = ""
                record["null_score"] = round(float(q.null_score), 6)
            records.append(record)
        return records

    def get_scorer(self, split: str = "dev") -> qa_metrics.SpanBasedQAScorer:
        return qa_metrics.SpanBasedQAScorer(self.config, self, split, self.v2)

    def write_test_predictions(self, outputs, split, output_dir) -> list[str]:
        """<output_dir>/<task>_<split>_preds.json (question id -> answer; "" = no answer for
        SQuAD 2.0 where the null score exceeds qa_na_threshold) and, for 2.0, the null odds."""
        questions = self.predict_questions(self.get_examples(split), outputs)
        threshold = self.config.qa_na_threshold
        predictions = {qid: "" if q.null_score is not None and q.null_score > threshold
                       else q.text for qid, q in questions.items()}
        path = os.path.join(output_dir, f"{self.name}_{split}_preds.json")
        io_utils.write_json(path, predictions)
        written = [path]
        if self.v2:
            odds_path = os.path.join(output_dir, f"{self.name}_{split}_null_odds.json")
            io_utils.write_json(odds_path, {qid: q.null_score for qid, q in questions.items()})
            written.append(odds_path)
        return written

    # -- model ----------------------------------------------------------------------------------

    def min_sequence_length(self) -> int:
        # Inference keeps the beam_size best start and end positions of every row.
        return self.config.beam_size

    def create_head(self, bert_config, seed=0) -> qa_head.QAHead:
        c = self.config
        return qa_head.QAHead(self.name, bert_config, max_seq_length=c.max_seq_length,
                              beam_size=c.beam_size,
                              joint_prediction=c.joint_prediction,
                              answerable_classifier=c.answerable_classifier,
                              answerable_uses_start_logits=c.answerable_uses_start_logits,
                              answerable_weight=c.answerable_weight, seed=seed)


class SQuADTask(QATask):
    """SQuAD in its JSON format (an MRQA-format .jsonl is read when no .json exists)."""


class SQuAD(SQuADTask):
    """SQuAD 2.0: unanswerable questions, null odds and no-answer thresholds."""

    def __init__(self, config, tokenizer):
        super().__init__(config, "squad", tokenizer, v2=True)


class SQuADv1(SQuADTask):
    def __init__(self, config, tokenizer):
        super().__init__(config, "squadv1", tokenizer)


class CustomQA(QATask):
    """A QA task defined by a `custom_tasks` spec (util/task_spec.py): SQuAD-format .json files
    (scored by the SQuAD 1.1 or, with "version": 2, the 2.0 script) or MRQA-format .jsonl."""

    def __init__(self, config, tokenizer, spec):
        self.spec = spec
        super().__init__(config, spec.name, tokenizer, v2=spec.get("version", 1) == 2)
        self.is_mrqa = any(not path.endswith(".json") for path in spec.files.values())

    def split_path(self, split: str) -> str:
        return task_lib.spec_file(self.spec, split)

    def v2_hint(self) -> str:
        return (f"for data with unanswerable questions set \"version\": 2 "
                f"({self.spec.where('version')})")


class MRQATask(QATask):
    """An MRQA 2019 shared-task dataset (JSONL, scored with the MRQA evaluation), one task per
    MRQA name of configure_finetuning.QA_TASKS (registered in task_builder.py)."""
    is_mrqa = True
    extensions = (".jsonl", ".jsonl.gz", ".json")

    def __init__(self, config, tokenizer, name: str):
        super().__init__(config, name, tokenizer)

