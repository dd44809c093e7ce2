"""Classification and regression tasks defined by a `custom_tasks` spec (util/task_spec.py).

They featurize, train and score exactly as the GLUE tasks (same encoding of one or two texts,
same heads): only where the rows come from differs. A custom task with SST-2's files and fields
is the built-in `sst` under another name.
"""
import os
from typing import Any

from finetune import task as task_lib
from finetune.classification import classification_metrics
from finetune.classification import classification_tasks
from finetune.classification import table_data
from util import io_utils


def _sorted_labels(labels: set[str]) -> list[str]:
    """Numerically when every label is an integer ("2" before "10"), else as strings."""
    try:
        return sorted(labels, key=int)
    except ValueError:
        return sorted(labels)


def training_labels(records: list[table_data.Record], path: str, labels_key: str) -> set[str]:
    """The labels of a training file, refused when there is nothing to learn (one label) or
    when two of them differ only in whitespace (one class split in two)."""
    first: dict[str, table_data.Record] = {}  # whitespace-normalised label -> its first row
    for r in records:
        label = r.values["label"]
        seen = first.setdefault(" ".join(label.split()), r)
        if seen.values["label"] != label:
            raise task_lib.TaskDataError(
                f"{r.source}: label {label!r} differs from label {seen.values['label']!r} "
                f"({seen.source}) only in whitespace; write them the same way")
    if len(first) == 1:
        label = next(iter(first.values())).values["label"]
        raise task_lib.TaskDataError(
            f"{path}: every row has label {label!r}; a classifier needs at least two labels in "
            f"its training file (the task's labels: {labels_key})")
    return {r.values["label"] for r in first.values()}


class _FromSpec:
    """Reading a spec's files: mixed into a SingleOutputTask."""

    spec = None  # set by the subclass constructor

    def _path(self, split: str) -> str:
        return task_lib.spec_file(self.spec, split)

    def split_files(self, split: str) -> list[str]:
        return [self._path(split)]

    def read(self, split: str, labeled: bool, max_rows: int | None = None
             ) -> list[table_data.Record]:
        fields = {"text_a": self.spec.get("text_a")}
        if self.spec.get("text_b") is not None:
            fields["text_b"] = self.spec.get("text_b")
        if labeled:
            fields["label"] = self.spec.get("label")
        path = self._path(split)
        records = table_data.read_records(path, self.spec.table_format(split), fields,
                                          self.spec.get("header", True), max_rows)
        if not records and split != "test":
            raise task_lib.TaskDataError(f"{path}: no data rows ({self.spec.where(split)})")
        for r in records:
            for role in ("text_a", "text_b", "label"):
                if role in r.values and r.values[role] is None:
                    raise task_lib.TaskDataError(f"{r.source}: field {fields[role]!r} ({role}) "
                                                 f"is null")
        return records

    def get_examples(self, split: str) -> list[classification_tasks.InputExample]:
        labeled = not self.is_unlabeled(split)
        examples = []
        records = self.read(split, labeled, self.max_examples(split))
        if split == "train" and self.spec.family == "classification":
            training_labels(records, self._path(split), self.spec.where("labels"))
        for r in records:
            label = self.check_label(r.values["label"], r.source) if labeled \
                else self.dummy_label()
            examples.append(classification_tasks.InputExample(
                task_name=self.name, eid=r.number, source=r.source, text_a=r.values["text_a"],
                text_b=r.values.get("text_b"), label=label))
        return examples

    def write_test_predictions(self, outputs, split, output_dir):
        """<output_dir>/<task>_<split>_predictions.jsonl, as predict.py writes them."""
        records = self.prediction_records(self.get_examples(split), outputs)
        path = os.path.join(output_dir, f"{self.name}_{split}_predictions.jsonl")
        io_utils.write_jsonl(path, records)
        return [path]


class CustomClassification(_FromSpec, classification_tasks.ClassificationTask):
    """Labels: the spec's `labels`, else those of the training file (stored with the model)."""

    def __init__(self, config, tokenizer, spec):
        self.spec = spec
        labels = spec.get("labels")
        if labels is None:
            labels = _sorted_labels(training_labels(self.read("train", True), self._path("train"),
                                                    spec.where("labels")))
        super().__init__(config, spec.name, tokenizer, labels)
        positive = spec.get("positive_label")
        self.positive_label = positive if positive is not None else self.label_list[-1]
        if self.positive_label not in self.label_list:
            raise task_lib.TaskDataError(f"{spec.where('positive_label')}: "
                                         f"{self.positive_label!r} is not a label of the task "
                                         f"({self.label_list})")

    def get_scorer(self, split="dev"):
        return classification_metrics.ChosenMetricsScorer(
            self.spec.get("metrics") or ["accuracy"], len(self.label_list),
            self.label_list.index(self.positive_label), label_names=self.label_list)

    def model_settings(self) -> dict[str, Any]:
        return {"labels": self.label_list}


class CustomRegression(_FromSpec, classification_tasks.RegressionTask):
    """Targets (y - lo) / (hi - lo) over the spec's `range` [lo, hi], else the training file's
    smallest and largest scores (stored with the model)."""

    def __init__(self, config, tokenizer, spec):
        self.spec = spec
        self.enforce_range = spec.get("range") is not None
        lo_hi = spec.get("range")
        if lo_hi is None:
            path = self._path("train")
            scores = [self._number(r.values["label"], r.source)
                      for r in self.read("train", True)]
            lo_hi = [min(scores), max(scores)]
            if lo_hi[0] == lo_hi[1]:
                raise task_lib.TaskDataError(f"{path}: every score is {lo_hi[0]}; nothing to "
                                             f"learn (or set {spec.where('range')})")
        lo, hi = map(float, lo_hi)
        super().__init__(config, spec.name, tokenizer, lo, hi, scale=hi - lo)

    def _number(self, label: str, source: str) -> float:
        return classification_tasks.parse_score(label, source, self.spec.name)

    def check_label(self, label, source):
        if self.enforce_range:
            return super().check_label(label, source)
        return self._number(label, source)  # scores outside the training range are fine

    def get_scorer(self, split="dev"):
        return classification_metrics.RegressionScorer(
            self.spec.get("metrics") or ["pearson", "spearman"])

    def model_settings(self) -> dict[str, Any]:
        return {"range": [self.min_value, self.max_value]}
