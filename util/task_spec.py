"""Fine-tuning tasks defined by data: the `custom_tasks` hparam, checked and made self-contained.

`custom_tasks` maps a task name to a spec: a JSON object, or the path of a .json file holding
one (its relative data paths are then relative to that file). Example:

    {"sentiment": {"type": "classification", "train": "data/train.csv", "dev": "data/dev.csv",
                   "text_a": "review", "label": "stars", "metrics": ["accuracy", "f1"]}}

Keys (every family): `type` (classification, regression, tagging, qa) and the files `train`,
`dev`, `test` (each optional; a split that is used must be there). The rest by family:

  classification / regression   TSV, CSV or JSONL (by extension, or `format`); `text_a` and
      optional `text_b` name the text fields and `label` the label field (column names of the
      header line; with `"header": false`, 0-based column numbers). Classification: `labels`
      (default: the labels of the training file, sorted), `metrics` from accuracy, f1, mcc
      (default accuracy), `positive_label` for binary F1 (default the second label).
      Regression: `range` [lo, hi] (default: the training file's smallest and largest score;
      targets are (y - lo) / hi as the official STS-B), `metrics` from pearson, spearman.
  tagging   CoNLL-style files: one token per line, whitespace-separated columns, a blank line
      between sentences. `word_column` (default 0), `tag_column` (default -1, the last).
      `encoding`: "span" (IOB2 / IOB1 / BIOES tags, the scheme read off each file, which is
      read as IOB2 and scored per span as conlleval; a file mixing schemes is refused) or
      "token" (any tag set, e.g. POS, scored per token); default: span when the training file
      holds tags of a chunk's form, O or B-/I-/E-/S-<type> (any other tag beside them is an
      error naming file and line), token when it holds none. `labels`: the tag types (span) or
      tags (token), default from train.
  qa        SQuAD-format JSON (or MRQA JSONL); `version` 1 (every question answerable, the
      default) or 2 (unanswerable questions, SQuAD 2.0's no-answer head and metrics).

Labels, ranges and tag sets read from the training file are stored in the fine-tuned model's
directory (finetune_config.json), so predicting needs no training data.
"""
import dataclasses
import json
import math
import os
import re
from typing import Any

from util import fs
from util.hparams import HParamError

FAMILIES = ("classification", "regression", "tagging", "qa")
SPLITS = ("train", "dev", "test")
TABLE_FORMATS = ("tsv", "csv", "jsonl")
CLASSIFICATION_METRICS = ("accuracy", "f1", "mcc")
REGRESSION_METRICS = ("pearson", "spearman")
TAG_ENCODINGS = ("span", "token")
_COMMON = {"type", *SPLITS}
_KEYS = {
    "classification": _COMMON | {"format", "header", "text_a", "text_b", "label", "labels",
                                 "metrics", "positive_label"},
    "regression": _COMMON | {"format", "header", "text_a", "text_b", "label", "range",
                             "metrics"},
    "tagging": _COMMON | {"word_column", "tag_column", "encoding", "labels"},
    "qa": _COMMON | {"version"},
}
# Keys that change how a trained model is evaluated, not what it learns or how text becomes
# features: a finished trial is re-evaluated when they change, a halted one continues.
EVAL_ONLY_KEYS = frozenset({"dev", "test", "metrics", "positive_label"})
_EXTENSIONS = {".tsv": "tsv", ".csv": "csv", ".jsonl": "jsonl", ".json": "jsonl"}
MAX_NAME_LENGTH = 64
# TensorFlow variable and scope names and portable file names all accept these (Python
# identifiers alone let through "é" or "变量", which TensorFlow refuses mid-run).
TASK_NAME = re.compile(rf"[a-z][a-z0-9_]{{0,{MAX_NAME_LENGTH - 1}}}")


@dataclasses.dataclass(frozen=True)
class TaskSpec:
    """One checked custom task; `files` maps split -> absolute path."""
    name: str
    family: str
    files: dict
    values: dict  # the spec as given (paths made absolute): what the model dir stores

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)

    def where(self, key: str = "") -> str:
        return f"hparam custom_tasks.{self.name}" + (f".{key}" if key else "")

    def table_format(self, split: str) -> str:
        """tsv, csv or jsonl for a classification/regression split's file."""
        fmt = self.get("format")
        if fmt:
            return fmt
        path = self.files[split]
        ext = os.path.splitext(path[:-3] if path.endswith(".gz") else path)[1].lower()
        return _EXTENSIONS[ext]


def without_eval_only_keys(spec: Any) -> Any:
    """A resolved spec without EVAL_ONLY_KEYS (what training and featurization depend on)."""
    if not isinstance(spec, dict):
        return spec
    return {k: v for k, v in spec.items() if k not in EVAL_ONLY_KEYS}


def _error(name: str, key: str, message: str) -> HParamError:
    return HParamError(f"hparam custom_tasks.{name}{'.' + key if key else ''}: {message}")


def resolve(name: str, value: Any) -> dict:
    """The spec object of `name` with every data path absolute (a spec file is read here)."""
    if not isinstance(name, str) or not TASK_NAME.fullmatch(name):
        raise _error(str(name), "", f"a task name must be a lower-case identifier of ASCII "
                     f"letters, digits and underscores, starting with a letter, at most "
                     f"{MAX_NAME_LENGTH} characters, as it names files, features and checkpoint "
                     f"variables; got {name!r}")
    base = fs.abspath(os.curdir)
    if isinstance(value, str):
        path = fs.abspath(value)
        if not fs.isfile(path):
            raise _error(name, "", f"spec file {path} {fs.not_a_file(path)}")
        try:
            with fs.open(path, encoding="utf-8-sig") as f:
                value = json.load(f)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise _error(name, "", f"spec file {path} is not valid JSON: {e}") from None
        base = os.path.dirname(path)
    if not isinstance(value, dict):
        raise _error(name, "", f"expected a JSON object (or the path of a .json file holding "
                     f"one), got {type(value).__name__} {value!r}")
    spec = dict(value)
    for split in SPLITS:
        if split in spec:
            if not isinstance(spec[split], str) or not spec[split]:
                raise _error(name, split, f"expected a file path, got {spec[split]!r}")
            try:
                fs.check_spelling(spec[split], "the path")
            except ValueError as e:
                raise _error(name, split, str(e)) from None
            spec[split] = fs.resolve_relative(base, spec[split])
    return spec


def _refuse_gzip(name: str, split: str, path: str | None, family: str) -> None:
    if path and path.lower().endswith(".gz"):
        raise _error(name, split, f"{path} is gzip-compressed; {family} task files are read "
                     f"as plain text: decompress it (gunzip) and name the uncompressed file")


def _check_field(name: str, spec: dict, key: str, header: bool, required: bool) -> None:
    if key not in spec or spec[key] is None:
        if required:
            raise _error(name, key, "missing (the name of the field that holds it)")
        return
    value = spec[key]
    if header and not isinstance(value, str):
        raise _error(name, key, f"expected a field name, got {value!r}")
    if not header and (isinstance(value, bool) or not isinstance(value, int)):
        raise _error(name, key, f"expected a 0-based column number (\"header\": false), "
                     f"got {value!r}")


def _check_string_list(name: str, spec: dict, key: str, choices=None) -> None:
    value = spec.get(key)
    if value is None:
        return
    if (not isinstance(value, list) or not value
            or not all(isinstance(v, str) and v for v in value)):
        raise _error(name, key, f"expected a non-empty list of strings, got {value!r}")
    if len(set(value)) != len(value):
        raise _error(name, key, f"lists a value twice: {value}")
    if choices is not None and any(v not in choices for v in value):
        raise _error(name, key, f"must be from {list(choices)}, got {value}")
    normalised = [" ".join(v.split()) for v in value]
    if len(set(normalised)) != len(value):
        twins = [v for v, n in zip(value, normalised) if normalised.count(n) > 1]
        raise _error(name, key, f"lists {twins[0]!r} and {twins[1]!r}, which differ only in "
                     f"whitespace")


def check(name: str, spec: dict) -> TaskSpec:
    """A TaskSpec from a resolved spec; HParamError naming the key for anything wrong."""
    family = spec.get("type")
    if family not in FAMILIES:
        raise _error(name, "type", f"must be one of {list(FAMILIES)}, got {family!r}")
    unknown = sorted(set(spec) - _KEYS[family])
    if unknown:
        raise _error(name, unknown[0], f"unknown key for a {family} task; known keys: "
                     f"{', '.join(sorted(_KEYS[family]))}")
    if not any(split in spec for split in SPLITS):
        raise _error(name, "", "names no data file (train, dev or test)")
    if family in ("classification", "regression"):
        fmt = spec.get("format")
        if fmt is not None and fmt not in TABLE_FORMATS:
            raise _error(name, "format", f"must be one of {list(TABLE_FORMATS)}, got {fmt!r}")
        for split in SPLITS:
            path = spec.get(split)
            _refuse_gzip(name, split, path, family)
            ext = path and os.path.splitext(path)[1].lower()
            if path and fmt is None and ext not in _EXTENSIONS:
                raise _error(name, split, f"cannot tell the format of {path} from its extension "
                             f"(.tsv, .csv, .jsonl); set \"format\"")
        header = spec.get("header", True)
        if not isinstance(header, bool):
            raise _error(name, "header", f"expected true or false, got {header!r}")
        _check_field(name, spec, "text_a", header, required=True)
        _check_field(name, spec, "text_b", header, required=False)
        _check_field(name, spec, "label", header, required=True)
        metrics = CLASSIFICATION_METRICS if family == "classification" else REGRESSION_METRICS
        _check_string_list(name, spec, "metrics", metrics)
    if family == "classification":
        _check_string_list(name, spec, "labels")
        if spec.get("labels") is not None and len(spec["labels"]) < 2:
            raise _error(name, "labels", f"a classifier needs at least two labels, got "
                         f"{spec['labels']}")
        positive = spec.get("positive_label")
        if positive is not None and not isinstance(positive, str):
            raise _error(name, "positive_label", f"expected a label string, got {positive!r}")
        labels = spec.get("labels")
        if positive is not None and labels is not None and positive not in labels:
            raise _error(name, "positive_label", f"{positive!r} is not one of labels {labels}")
    if family == "regression" and spec.get("range") is not None:
        lo_hi = spec["range"]
        if (not isinstance(lo_hi, list) or len(lo_hi) != 2
                or not all(isinstance(v, (int, float)) and not isinstance(v, bool)
                           for v in lo_hi)
                or not all(math.isfinite(v) for v in lo_hi)
                or not lo_hi[0] < lo_hi[1] or lo_hi[1] <= 0):
            raise _error(name, "range", f"expected [lo, hi], finite, with lo < hi and hi > 0, got "
                         f"{lo_hi!r}")
    if family == "tagging":
        for key, default in (("word_column", 0), ("tag_column", -1)):
            value = spec.get(key, default)
            if isinstance(value, bool) or not isinstance(value, int):
                raise _error(name, key, f"expected a column number, got {value!r}")
        if spec.get("word_column", 0) == spec.get("tag_column", -1):
            raise _error(name, "tag_column", f"is {spec.get('tag_column', -1)}, the word_column "
                         f"too: the tags must be another column than the words")
        for split in SPLITS:
            _refuse_gzip(name, split, spec.get(split), family)
        encoding = spec.get("encoding")
        if encoding is not None and encoding not in TAG_ENCODINGS:
            raise _error(name, "encoding", f"must be one of {list(TAG_ENCODINGS)}, got "
                         f"{encoding!r}")
        _check_string_list(name, spec, "labels")
    if family == "qa" and spec.get("version", 1) not in (1, 2):
        raise _error(name, "version", f"must be 1 or 2, got {spec.get('version')!r}")
    files = {split: spec[split] for split in SPLITS if split in spec}
    return TaskSpec(name, family, files, spec)


def parse(custom_tasks: Any) -> dict[str, TaskSpec]:
    """name -> TaskSpec for the `custom_tasks` hparam (resolving is idempotent)."""
    if not isinstance(custom_tasks, dict):
        raise HParamError(f"hparam custom_tasks: expected a JSON object of task name -> spec, "
                          f"got {custom_tasks!r}")
    return {name: check(name, resolve(name, spec)) for name, spec in custom_tasks.items()}
