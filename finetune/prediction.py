"""Predictions on new text with a fine-tuned trial: raw input -> the task's examples -> the model
-> one JSON record per input example (the records the trial's evaluation writes).

Input formats, by task family (`--format`; the default is guessed from the file's extension):

  classification, regression  lines: one text per line (a pair task: text_a TAB text_b);
      tsv / csv (header line) and jsonl: the task's text fields (a custom task's `text_a` /
      `text_b`; "text_a" / "text_b" for the built-in GLUE tasks)
  tagging   lines: one sentence per line, words separated by whitespace; jsonl: {"words": [...]}
      or {"text": "..."}; conll: the task's word column, a blank line between sentences
  qa        jsonl: {"context", "question", optional "id"}; squad: a SQuAD-format JSON file

Records: classification {"label", "probabilities": {label: p}}; regression {"score"}; tagging
{"words", "tags"}; QA {"id", "answer", "probability"} (SQuAD 2.0 also "null_score"; answer "" when
it exceeds qa_na_threshold). Examples go through the task's own featurization and the model in
fixed-size batches, as in evaluation, so a prediction equals the one evaluation makes.
"""
import json
import os
from typing import Any, Iterator, Sequence

import numpy as np
import tensorflow as tf

from finetune import bucketing
from finetune import preprocessing
from finetune import task as task_lib
from finetune.classification import classification_tasks
from finetune.classification import table_data
from finetune.qa import qa_data
from finetune.qa import qa_tasks
from finetune.tagging import tagging_tasks
from util import fs
from util import preemption

FORMATS = ("lines", "tsv", "csv", "jsonl", "conll", "squad")
_BY_EXTENSION = {".txt": "lines", ".tsv": "tsv", ".csv": "csv", ".jsonl": "jsonl",
                 ".json": "squad", ".conll": "conll"}


def family(task: task_lib.Task) -> str:
    if isinstance(task, classification_tasks.SingleOutputTask):
        return "classification"
    if isinstance(task, tagging_tasks.TaggingTask):
        return "tagging"
    if isinstance(task, qa_tasks.QATask):
        return "qa"
    raise ValueError(f"task {task.name!r} ({type(task).__name__}) has no prediction input format")


ACCEPTED = {"classification": ("lines", "tsv", "csv", "jsonl"),
            "tagging": ("lines", "jsonl", "conll"), "qa": ("jsonl", "squad")}


def guess_format(path: str) -> str:
    fmt = _BY_EXTENSION.get(os.path.splitext(path)[1].lower()) if path != "-" else None
    return fmt or "lines"


def check_no_blank_lines(path: str) -> None:
    """Refuses an empty line before an example (file:line): output record i is input example i,
    and an empty line would either be dropped or predicted as an empty text. Empty lines at the
    end precede no example and are fine; CoNLL separates sentences with them."""
    blank = None
    with fs.open(path, encoding="utf-8-sig", newline="") as f:
        try:
            for number, line in enumerate(f, start=1):
                if not line.strip():
                    blank = blank or number
                elif blank is not None:
                    raise task_lib.TaskDataError(
                        f"{path}:{blank}: empty line; every line is an example (output record i "
                        "is input example i): remove it or put text there")
        except UnicodeDecodeError:
            return  # the reader names the file, line and byte


def _lines(path: str) -> Iterator[tuple[str, str]]:
    """(where, line) for every non-blank line of a file (check_no_blank_lines refused blank lines
    between examples)."""
    with fs.open(path, encoding="utf-8-sig") as f:
        try:
            for number, line in enumerate(f, start=1):
                if line.strip():
                    yield f"{path}:{number}", line.rstrip("\r\n")
        except UnicodeDecodeError as e:
            raise task_lib.not_utf8_error(path, e) from None


def _json_objects(path: str) -> Iterator[tuple[str, dict]]:
    for where, line in _lines(path):
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise task_lib.TaskDataError(f"{where}: not a JSON object ({e.msg} at column "
                                         f"{e.colno})") from None
        if not isinstance(obj, dict):
            raise task_lib.TaskDataError(f"{where}: expected a JSON object, got "
                                         f"{type(obj).__name__}")
        yield where, obj


def _text_fields(task) -> dict[str, Any]:
    spec = getattr(task, "spec", None)
    if spec is not None:
        fields = {"text_a": spec.get("text_a")}
        if spec.get("text_b") is not None:
            fields["text_b"] = spec.get("text_b")
        return fields
    pair = task.train_layout.text_b is not None
    return {"text_a": "text_a", **({"text_b": "text_b"} if pair else {})}


def _sentence_examples(task, path: str, fmt: str) -> list:
    fields = _text_fields(task)
    if fmt == "lines":
        rows = []
        for where, line in _lines(path):
            parts = line.split("\t", 1) if "text_b" in fields else [line]
            if "text_b" in fields and len(parts) < 2:
                raise task_lib.TaskDataError(f"{where}: task {task.name} reads sentence pairs: "
                                             f"expected text_a TAB text_b")
            rows.append((where, dict(zip(("text_a", "text_b"), parts))))
    else:
        spec = getattr(task, "spec", None)
        header = spec.get("header", True) if spec is not None else True
        rows = [(r.source, r.values) for r in table_data.read_records(path, fmt, fields, header)]
    for where, values in rows:
        for role, field in fields.items():
            if not (values.get(role) or "").strip():
                raise task_lib.TaskDataError(f"{where}: empty text ({role}" + (
                    f", field {field!r}" if field != role else "") + "); every row is an "
                    "example: remove the row or give it text")
    return [classification_tasks.InputExample(
        task_name=task.name, eid=i, source=where, text_a=values["text_a"],
        text_b=values.get("text_b"), label=task.dummy_label())
        for i, (where, values) in enumerate(rows)]


def _tagging_examples(task, path: str, fmt: str) -> list:
    sentences: list[tuple[str, list[str]]] = []
    if fmt == "lines":
        sentences = [(where, line.split()) for where, line in _lines(path)]
    elif fmt == "jsonl":
        for where, obj in _json_objects(path):
            words = obj.get("words", obj.get("text"))
            if isinstance(words, str):
                words = words.split()
            if not isinstance(words, list) or not all(isinstance(w, str) for w in words):
                raise task_lib.TaskDataError(f"{where}: expected \"words\" (a list of strings) "
                                             f"or \"text\" (a string)")
            sentences.append((where, words))
            if not words:
                raise task_lib.TaskDataError(f"{where}: no words; every line is an example: "
                                             "remove the line or give it words")
    else:
        column = task.word_column
        sentences = [(s.source, s.words)
                     for s in tagging_tasks.read_conll(path, column, column, None)]
    placeholder = task.label_list[0]
    return [tagging_tasks.TaggingExample(task_name=task.name, eid=i, source=where, words=words,
                                         tags=[placeholder] * len(words),
                                         labels=[placeholder] * len(words))
            for i, (where, words) in enumerate(sentences)]


def _qa_examples(task, path: str, fmt: str) -> list:
    if fmt == "squad":
        paragraphs = qa_data.iter_squad(path, task.v2, labeled=False)
    else:
        paragraphs = qa_data.iter_plain_questions(_json_objects(path))
    paragraphs = _non_empty_questions(paragraphs)
    examples, _ = qa_data.build_examples(paragraphs, task.name, is_training=False)
    return examples


def _non_empty_questions(paragraphs):
    """An empty context or question is refused (file:line): it has no answer to predict."""
    for context, questions in paragraphs:
        for q in questions:
            if not context.strip() or not q.question.strip():
                raise task_lib.TaskDataError(
                    f"{q.where}: empty {'context' if not context.strip() else 'question'}; "
                    "every question is an example: remove it or fill it in")
        yield context, questions


def check_format(task: task_lib.Task, fmt: str) -> None:
    kind = family(task)
    if fmt not in ACCEPTED[kind]:
        raise task_lib.TaskDataError(f"task {task.name} ({kind}) reads --format "
                                     f"{' / '.join(ACCEPTED[kind])}, not {fmt}")


def read_examples(task: task_lib.Task, path: str, fmt: str) -> list[task_lib.Example]:
    """The examples of an input file in `fmt`, eid = position (predict.py copies standard
    input to a file first, so every format reads from it)."""
    check_format(task, fmt)
    if fmt != "conll" and fmt != "squad":
        check_no_blank_lines(path)
    reader = {"classification": _sentence_examples, "tagging": _tagging_examples,
              "qa": _qa_examples}[family(task)]
    return reader(task, path, fmt)


class Predictor:
    """Runs a trial's model on featurized examples of one of its tasks, batch by batch."""

    def __init__(self, config, tasks: Sequence[task_lib.Task], model, task: task_lib.Task,
                 batch_size: int):
        self._task = task
        self._task_id = [t.name for t in tasks].index(task.name)
        self._batch_size = batch_size
        # The features and padding rows evaluation uses (its batches are these batches).
        features = preprocessing.Preprocessor(config, tasks)
        self._specs = features.feature_specs
        self._padding = features.padding_features()
        self._trim = features.trimmer  # the length buckets evaluation uses
        signature = bucketing.relaxed_signature({
            spec.name: tf.TensorSpec([batch_size] + list(spec.shape),
                                     tf.int32 if spec.is_int_feature else tf.float32)
            for spec in self._specs})
        self._forward = tf.function(lambda features: model(features, training=False)[1],
                                    input_signature=[signature], autograph=False)

    def _batch(self, rows: list[dict]) -> dict[str, tf.Tensor]:
        rows = rows + [self._padding] * (self._batch_size - len(rows))
        batch = {}
        for spec in self._specs:
            values = np.stack([np.asarray(r[spec.name]) if spec.name in r
                               else spec.default_values() for r in rows])
            batch[spec.name] = values.astype(np.int32 if spec.is_int_feature else np.float32)
        return {name: tf.constant(values) for name, values in self._trim(batch).items()}

    def outputs(self, examples: Sequence[task_lib.Example]) -> list[dict[str, np.ndarray]]:
        """The head's outputs for every feature row of `examples`, padding dropped."""
        rows = []
        for example in examples:
            preemption.check(f"featurizing {example.source}")
            featurized = self._task.featurize(example, is_training=False)
            rows += featurized if isinstance(featurized, list) else [featurized]
        results = []
        for start in range(0, len(rows), self._batch_size):
            preemption.check(f"predicting (feature rows {start + 1}-"
                             f"{min(start + self._batch_size, len(rows))} of {len(rows)})")
            outputs = self._forward(self._batch(rows[start:start + self._batch_size]))
            mine = {k: v.numpy() for k, v in outputs[self._task.name].items()}
            for i in np.flatnonzero(outputs["task_id"].numpy() == self._task_id):
                results.append({k: v[i] for k, v in mine.items()})
        return results

    def records(self, examples: Sequence[task_lib.Example]) -> list[dict[str, Any]]:
        return self._task.prediction_records(examples, self.outputs(examples))
