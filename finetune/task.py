"""The fine-tuning `Task` interface: a data half (pure Python) and a model half (a head module).

A task plugs into run_finetuning.py by subclassing `Task` and registering in task_builder.py:

  data half   get_examples(split)       raw examples read from the task's data directory
              featurize(example, ...)   one example -> one feature dict (or a list of them, e.g.
                                        QA windows), keys from get_feature_specs()
              get_feature_specs()       the task's own features, named "<task>_..."
              get_scorer(split)         a Scorer fed the per-example outputs of the head
              get_eval_splits()         dev splits and the names their results are reported under
              get_test_splits()         splits whose predictions write_test_outputs writes
              write_test_predictions()  predictions -> files (GLUE TSVs, SQuAD json, ...)
              cache_key()               settings that change featurization (feature-cache key)
              split_files(split)        the files a split is read from (their content: ditto)
              prediction_records(...)   one JSON-ready prediction per example (predict.py, and
                                        the dev predictions written at each evaluation)
              model_settings()          what predicting needs besides the hparams (a custom
                                        task's labels), stored with the fine-tuned model
  model half  create_head(bert_config)  a heads.TaskHead under "task_specific/<task>/"

Several tasks train together in one batch: every row carries all tasks' features (zeros for the
others) plus `task_id`, and the loss of each row comes from its own task's head (as the
official multi-task design).
"""
import abc
import dataclasses
import os
from typing import Any, Sequence

import configure_finetuning
from finetune import feature_spec
from finetune import heads
from finetune import scorer as scorer_lib
from model import modeling
from util import fs

# Rows read per split in debug mode unless max_*_examples says otherwise (the official release
# reads 100 lines per file in debug mode).
DEBUG_MAX_EXAMPLES = 100


GZIP_MAGIC = b"\x1f\x8b"


class TaskDataError(ValueError):
    """Task data that is missing or malformed; the message names the file (and line)."""


def not_utf8_error(path: str, error: UnicodeDecodeError) -> TaskDataError:
    """A TaskDataError naming the file, line and byte offset of the first invalid UTF-8 byte
    (the decoder's own error names neither the file nor the line)."""
    try:
        with fs.open_maybe_gzip(path, "rb") as f:
            raw = f.read()
        if raw.startswith(GZIP_MAGIC):
            return TaskDataError(f"{path}: gzip-compressed data, read as text; decompress it "
                                 f"first (gunzip, then name the uncompressed file)")
        raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        return TaskDataError(f"{path}:{line}: not valid UTF-8 (byte offset {e.start}: "
                             f"{raw[e.start:e.start + 1]!r}); re-save the file as UTF-8")
    except OSError:
        pass
    return TaskDataError(f"{path}: not valid UTF-8 ({error.reason}); re-save the file as UTF-8")


def spec_file(spec, split: str) -> str:
    """The path of `split` in a custom task's spec (util/task_spec.TaskSpec), which must exist."""
    if split not in spec.files:
        raise TaskDataError(f"{spec.where()} names no {split} file")
    path = spec.files[split]
    if not fs.isfile(path):
        raise TaskDataError(f"{spec.where(split)}: file {path} {fs.not_a_file(path)}")
    return path


@dataclasses.dataclass
class Example:
    """One raw example. `eid` is unique within (task, split); `source` is "file:line"."""
    task_name: str
    eid: int
    source: str = ""


class Task(abc.ABC):
    """Override to add a fine-tuning task (see the module docstring)."""

    # Alternative directory names tried when <raw_data_dir with {task}=name> does not exist,
    # e.g. ("SST-2",) so the GLUE download layout works unchanged.
    alt_dir_names: Sequence[str] = ()

    def __init__(self, config: configure_finetuning.FinetuningConfig, name: str):
        self.config = config
        self.name = name

    def __repr__(self) -> str:
        return f"Task({self.name})"

    # -- where the data is ------------------------------------------------------------------------

    def data_dir(self) -> str:
        """The task's data directory; raises TaskDataError naming every place looked at."""
        candidates = [self.config.task_data_dir(self.name)]
        candidates += [self.config.task_data_dir(alt) for alt in self.alt_dir_names]
        for path in candidates:
            if fs.isdir(path):
                return path
        raise TaskDataError(
            f"task {self.name!r}: data directory not found; looked for "
            f"{' or '.join(candidates)} (set hparam raw_data_dir, a pattern with {{task}})")

    def data_file(self, filename: str) -> str:
        """Path of `filename` in the task's data directory; a clear error when it is missing."""
        directory = self.data_dir()
        path = os.path.join(directory, filename)
        if not fs.isfile(path):
            present = sorted(fs.listdir(directory))
            raise TaskDataError(
                f"task {self.name!r}: expected file {path} (directory has: "
                f"{', '.join(present) if present else 'nothing'})")
        return path

    def split_files(self, split: str) -> list[str]:
        """The files get_examples(split) reads: their content is part of the feature-cache key.
        Default: every file of the data directory (a task that knows better overrides it)."""
        directory = self.data_dir()
        return [os.path.join(directory, n) for n in sorted(fs.listdir(directory))
                if not n.startswith(".") and fs.isfile(os.path.join(directory, n))]

    def max_examples(self, split: str) -> int | None:
        """How many examples of `split` to read: max_train_examples / max_eval_examples / all."""
        if split == "train":
            limit = self.config.max_train_examples
        elif split.startswith("dev"):
            limit = self.config.max_eval_examples
        else:
            limit = None
        if limit is None and self.config.debug:
            limit = DEBUG_MAX_EXAMPLES
        return limit

    # -- data half --------------------------------------------------------------------------------

    @abc.abstractmethod
    def get_examples(self, split: str) -> list[Example]:
        """Examples of `split` ("train", "dev", "test", or task-specific names)."""

    @abc.abstractmethod
    def get_feature_specs(self) -> list[feature_spec.FeatureSpec]:
        """This task's features (the shared ones come from feature_spec.get_shared_feature_specs)."""

    @abc.abstractmethod
    def featurize(self, example: Example, is_training: bool,
                  log_example: bool = False) -> dict[str, Any] | list[dict[str, Any]]:
        """Feature dict(s) for one example, including the shared features and "task_id"."""

    @abc.abstractmethod
    def get_scorer(self, split: str = "dev") -> scorer_lib.Scorer:
        """A fresh scorer for evaluating on `split`."""

    def get_eval_splits(self) -> list[tuple[str, str]]:
        """(split, results name) pairs evaluated by do_eval; MNLI has matched and mismatched."""
        return [("dev", self.name)]

    def get_test_splits(self) -> list[str]:
        return ["test"]

    def write_test_predictions(self, outputs: list[dict[str, Any]], split: str,
                               output_dir: str) -> list[str]:
        """Writes predictions for `split` from the head's per-example outputs; returns the paths.

        Tasks without a test-output format leave this unimplemented (the runner logs a skip).
        """
        raise NotImplementedError(f"task {self.name!r} does not write test predictions")

    def write_eval_outputs(self, scorer: scorer_lib.Scorer, split: str,
                           trial: int) -> list[str]:
        """Optional files describing one evaluation (e.g. per-word predictions), written next to
        the results files after `scorer` has seen every example of `split`; returns the paths."""
        return []

    def cache_key(self) -> dict[str, Any]:
        """Task settings that change featurized data; part of the tfrecord cache key."""
        return {}

    def model_settings(self) -> dict[str, Any]:
        """Settings read from the data that a model of this task needs to predict (a custom
        task's label list); stored in the trial's finetune_config.json."""
        return {}

    def prediction_records(self, examples: Sequence[Example],
                           outputs: Sequence[dict[str, Any]]) -> list[dict[str, Any]] | None:
        """One JSON-ready prediction per example, in example order, from the head's outputs of
        every feature row of `examples`; None when the task has no prediction format."""
        return None

    def task_id(self) -> int:
        return self.config.task_names.index(self.name)

    # -- model half -------------------------------------------------------------------------------

    def min_sequence_length(self) -> int:
        """The shortest batch length the task's head accepts: length buckets
        (finetune/bucketing.py) never cut a batch below it."""
        return 0

    @abc.abstractmethod
    def create_head(self, bert_config: modeling.BertConfig, seed: int = 0) -> heads.TaskHead:
        """The task's head; its variables are created now, under "task_specific/<task>/"."""
