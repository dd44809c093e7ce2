"""GLUE text classification and regression tasks and their heads.

Single sentences are encoded `[CLS] a [SEP]`, pairs `[CLS] a [SEP] b [SEP]` with segment ids 0 for
the first part and 1 for the second (as BERT/ELECTRA). Heads read the [CLS] vector, apply dropout
0.1 (fixed, as the official release's keep_prob=0.9) and one dense layer, under
`task_specific/<task>/dense/{kernel,bias}`.
"""
import abc
import dataclasses
import logging
import math
import os
from typing import Any

import numpy as np
import tensorflow as tf

import configure_finetuning
from finetune import feature_spec
from finetune import heads
from finetune import task as task_lib
from finetune.classification import classification_metrics
from finetune.classification import glue_data
from model import layers
from model import modeling
from util import io_utils

log = logging.getLogger(__name__)

HEAD_DROPOUT = 0.1  # the official heads use tf.nn.dropout(keep_prob=0.9) whatever the config


@dataclasses.dataclass
class InputExample(task_lib.Example):
    """A sentence (pair) with a label string ("0", "entailment", "3.800", ...)."""
    text_a: str = ""
    text_b: str | None = None
    label: Any = None


def truncate_seq_pair(tokens_a: list, tokens_b: list, max_length: int) -> None:
    """Pops tokens from the end of the longer sequence until both fit in `max_length` (in place).

    Cutting the longer one first keeps most information when one side is short (BERT's rule).
    """
    while len(tokens_a) + len(tokens_b) > max_length:
        (tokens_a if len(tokens_a) > len(tokens_b) else tokens_b).pop()


# -- heads --------------------------------------------------------------------------------------


class ClassificationHead(heads.LinearTaskHead):
    """Dropout + dense on the [CLS] vector -> logits [B, num_labels]; softmax cross-entropy."""

    def __call__(self, encoder_output, features, *, training, seeds, percent_done):
        reprs = tf.cast(encoder_output.pooled_output, tf.float32)  # [B, H]
        reprs = layers.dropout(reprs, HEAD_DROPOUT, seeds, training)
        logits = self.dense(reprs)  # [B, C]
        log_probs = tf.nn.log_softmax(logits, axis=-1)
        label_ids = features[f"{self.task_name}_label_ids"]  # [B]
        labels = tf.one_hot(label_ids, depth=self.num_labels, dtype=tf.float32)
        losses = -tf.reduce_sum(labels * log_probs, axis=-1)  # [B]
        outputs = dict(loss=losses, logits=logits,
                       predictions=tf.argmax(logits, axis=-1, output_type=tf.int32),
                       label_ids=label_ids, eid=features[f"{self.task_name}_eid"])
        return losses, outputs


class RegressionHead(heads.LinearTaskHead):
    """Dropout + dense on the [CLS] vector -> a score [B]; squared error."""

    def __init__(self, task_name: str, bert_config: modeling.BertConfig, seed: int = 0):
        super().__init__(task_name, bert_config, 1, seed)

    def __call__(self, encoder_output, features, *, training, seeds, percent_done):
        reprs = tf.cast(encoder_output.pooled_output, tf.float32)
        reprs = layers.dropout(reprs, HEAD_DROPOUT, seeds, training)
        predictions = tf.squeeze(self.dense(reprs), -1)  # [B]
        targets = features[f"{self.task_name}_targets"]
        losses = tf.square(predictions - targets)
        outputs = dict(loss=losses, predictions=predictions, targets=targets,
                       eid=features[f"{self.task_name}_eid"])
        return losses, outputs


# -- tasks --------------------------------------------------------------------------------------


class SingleOutputTask(task_lib.Task):
    """A task with one prediction per (sentence or sentence pair) example, read from GLUE TSVs."""

    # File layouts of labeled (train/dev) and unlabeled (test) splits.
    train_layout: glue_data.Layout
    test_layout: glue_data.Layout
    # Name of the file in a GLUE submission, e.g. "SST-2" -> SST-2.tsv.
    glue_name: str = ""
    # Train on both sentence orders when config.double_unordered: the official release does it
    # for MRPC and STS-B only (QQP, also order-free, is trained as given).
    unordered_pair = False

    def __init__(self, config: configure_finetuning.FinetuningConfig, name: str, tokenizer):
        super().__init__(config, name)
        self._tokenizer = tokenizer

    # -- reading --------------------------------------------------------------------------------

    def split_file(self, split: str) -> str:
        return split + ".tsv"

    def layout(self, split: str) -> glue_data.Layout:
        return self.test_layout if self.is_unlabeled(split) else self.train_layout

    @staticmethod
    def is_unlabeled(split: str) -> bool:
        return split.startswith("test") or split == "diagnostic"

    def split_files(self, split: str) -> list[str]:
        return [self.data_file(self.split_file(split))]

    def get_examples(self, split: str) -> list[InputExample]:
        path = self.data_file(self.split_file(split))
        rows = glue_data.read_rows(path, self.layout(split), self.max_examples(split))
        examples = [self._make_example(row, split) for row in rows]
        if self.unordered_pair and self.config.double_unordered and split == "train":
            offset = len(examples)
            examples += [InputExample(task_name=self.name, eid=e.eid + offset, source=e.source,
                                      text_a=e.text_b, text_b=e.text_a, label=e.label)
                         for e in list(examples)]
        return examples

    def _make_example(self, row: glue_data.Row, split: str) -> InputExample:
        if self.is_unlabeled(split):
            label = self.dummy_label()
            eid = row.number
            if row.index is not None:
                try:
                    eid = int(row.index)
                except ValueError:
                    raise task_lib.TaskDataError(
                        f"{row.source}: index column holds {row.index!r}, expected an integer"
                    ) from None
        else:
            label = self.check_label(row.label, row.source)
            eid = row.number
        return InputExample(task_name=self.name, eid=eid, source=row.source, text_a=row.text_a,
                            text_b=row.text_b, label=label)

    @abc.abstractmethod
    def check_label(self, label: str, source: str) -> Any:
        """The validated label of a row; raises TaskDataError naming `source` when invalid."""

    @abc.abstractmethod
    def dummy_label(self) -> Any:
        """Placeholder label for unlabeled splits."""

    def cache_key(self) -> dict[str, Any]:
        return {"double_unordered": bool(self.unordered_pair and self.config.double_unordered)}

    # -- featurizing ----------------------------------------------------------------------------

    def featurize(self, example: InputExample, is_training: bool, log_example: bool = False):
        max_len = self.config.max_seq_length
        tokens_a = self._tokenizer.tokenize(example.text_a)
        tokens_b = self._tokenizer.tokenize(example.text_b) if example.text_b else None
        if tokens_b:
            truncate_seq_pair(tokens_a, tokens_b, max_len - 3)  # [CLS] a [SEP] b [SEP]
        else:
            tokens_a = tokens_a[:max_len - 2]  # [CLS] a [SEP]
        tok = self._tokenizer
        input_ids = [tok.cls_id] + tok.convert_tokens_to_ids(tokens_a) + [tok.sep_id]
        segment_ids = [0] * len(input_ids)
        if tokens_b:
            input_ids += tok.convert_tokens_to_ids(tokens_b) + [tok.sep_id]
            segment_ids += [1] * (len(tokens_b) + 1)
        input_mask = [1] * len(input_ids)
        padding = max_len - len(input_ids)
        input_ids += [tok.pad_id] * padding
        input_mask += [0] * padding
        segment_ids += [0] * padding
        features = {
            "input_ids": input_ids,
            "input_mask": input_mask,
            "segment_ids": segment_ids,
            "task_id": self.task_id(),
            f"{self.name}_eid": example.eid,
        }
        features.update(self._label_features(example))
        if log_example:
            tokens = ["[CLS]"] + tokens_a + ["[SEP]"] + ((tokens_b + ["[SEP]"]) if tokens_b else [])
            log.info("%s example %s (%s)\n  tokens: %s\n  input_ids: %s\n  segment_ids: %s\n"
                     "  label features: %s", self.name, example.eid, example.source,
                     " ".join(tokens), " ".join(map(str, input_ids[:len(tokens)])),
                     " ".join(map(str, segment_ids[:len(tokens)])),
                     self._label_features(example))
        return features

    @abc.abstractmethod
    def _label_features(self, example: InputExample) -> dict[str, Any]:
        """The task's label feature(s) of an example."""

    # -- test outputs ---------------------------------------------------------------------------

    def submission_name(self, split: str) -> str:
        """The GLUE submission file name (without .tsv) for a test split."""
        return self.glue_name

    @abc.abstractmethod
    def format_prediction(self, outputs: dict[str, Any]) -> str:
        """One test-set prediction as GLUE's submission file writes it."""

    @abc.abstractmethod
    def prediction_record(self, outputs: dict[str, Any]) -> dict[str, Any]:
        """One example's prediction for predict.py's JSONL (label and probabilities, or score)."""

    def prediction_records(self, examples, outputs):
        by_eid = {int(np.asarray(o["eid"]).item()): o for o in outputs}
        missing = [e.source for e in examples if e.eid not in by_eid]
        if missing:
            raise ValueError(f"task {self.name}: no model output for {missing[0]} "
                             f"(and {len(missing) - 1} other examples)")
        return [self.prediction_record(by_eid[e.eid]) for e in examples]

    def write_test_predictions(self, outputs, split, output_dir):
        """GLUE submission TSV `<output_dir>/<GLUE name>.tsv`: header "index\\tprediction"."""
        rows = {}
        for out in outputs:
            eid = int(np.asarray(out["eid"]).item())
            if eid in rows:
                raise ValueError(f"task {self.name} {split}: two predictions for index {eid}")
            rows[eid] = self.format_prediction(out)
        path = os.path.join(output_dir, self.submission_name(split) + ".tsv")
        lines = ["index\tprediction"] + [f"{eid}\t{rows[eid]}" for eid in sorted(rows)]
        io_utils.write_text(path, "\n".join(lines) + "\n")
        return [path]


def parse_score(label: str, source: str, task_name: str) -> float:
    """A regression label as a finite number (NaN, inf, 1e999 would poison the loss)."""
    try:
        value = float(label)
    except ValueError:
        raise task_lib.TaskDataError(
            f"{source}: label {label!r} of task {task_name} is not a number") from None
    if not math.isfinite(value):
        raise task_lib.TaskDataError(
            f"{source}: label {label!r} of task {task_name} is not a finite number")
    return value


def whitespace_twin(label: str, labels) -> str | None:
    """The label of `labels` that `label` equals but for whitespace, if any."""
    key = " ".join(label.split())
    return next((other for other in labels if other != label and " ".join(other.split()) == key),
                None)


class ClassificationTask(SingleOutputTask):
    """A single categorical label per example; labels are the strings of `label_list`."""

    def __init__(self, config, name, tokenizer, label_list: list[str]):
        super().__init__(config, name, tokenizer)
        self.label_list = list(label_list)
        self._label_map = {label: i for i, label in enumerate(self.label_list)}

    def check_label(self, label, source):
        if label not in self._label_map:
            twin = whitespace_twin(label, self.label_list)
            if twin is not None:
                raise task_lib.TaskDataError(
                    f"{source}: label {label!r} of task {self.name} differs from label {twin!r} "
                    f"only in whitespace")
            raise task_lib.TaskDataError(
                f"{source}: unknown label {label!r} for task {self.name}; expected one of "
                f"{self.label_list}")
        return label

    def dummy_label(self):
        return self.label_list[0]

    def cache_key(self):
        return dict(super().cache_key(), labels=self.label_list)

    def get_feature_specs(self):
        return [feature_spec.FeatureSpec(f"{self.name}_eid", []),
                feature_spec.FeatureSpec(f"{self.name}_label_ids", [])]

    def _label_features(self, example):
        return {f"{self.name}_label_ids": self._label_map[example.label]}

    def create_head(self, bert_config, seed=0):
        return ClassificationHead(self.name, bert_config, len(self.label_list), seed)

    def get_scorer(self, split="dev"):
        return classification_metrics.AccuracyScorer(label_names=self.label_list)

    def format_prediction(self, outputs):
        return self.label_list[int(np.asarray(outputs["predictions"]).item())]

    def prediction_record(self, outputs):
        logits = np.asarray(outputs["logits"], np.float64)
        probabilities = np.exp(logits - logits.max())
        probabilities /= probabilities.sum()
        return {"label": self.format_prediction(outputs),
                "probabilities": {label: round(float(p), 6)
                                  for label, p in zip(self.label_list, probabilities)}}


class RegressionTask(SingleOutputTask):
    """A real-valued score in [min_value, max_value], trained on (score - min) / scale; the
    scale is max_value unless given (the official normalisation: STS-B's scores are 0..5)."""

    def __init__(self, config, name, tokenizer, min_value: float, max_value: float,
                 scale: float | None = None):
        super().__init__(config, name, tokenizer)
        self.min_value = min_value
        self.max_value = max_value
        self.scale = scale or max_value

    def check_label(self, label, source):
        value = parse_score(label, source, self.name)
        if not self.min_value <= value <= self.max_value:
            raise task_lib.TaskDataError(
                f"{source}: label {value} of task {self.name} is outside "
                f"[{self.min_value}, {self.max_value}]")
        return value

    def dummy_label(self):
        return 0.0

    def get_feature_specs(self):
        return [feature_spec.FeatureSpec(f"{self.name}_eid", []),
                feature_spec.FeatureSpec(f"{self.name}_targets", [], is_int_feature=False)]

    def _label_features(self, example):
        return {f"{self.name}_targets": (float(example.label) - self.min_value) / self.scale}

    def create_head(self, bert_config, seed=0):
        return RegressionHead(self.name, bert_config, seed)

    def get_scorer(self, split="dev"):
        return classification_metrics.RegressionScorer()

    def score(self, outputs) -> float:
        """The predicted score on the label's scale (the head predicts (y - min) / scale)."""
        return float(np.asarray(outputs["predictions"]).item()) * self.scale + self.min_value

    def format_prediction(self, outputs):
        return f"{min(max(self.score(outputs), self.min_value), self.max_value):.3f}"

    def prediction_record(self, outputs):
        return {"score": round(self.score(outputs), 6)}


# -- GLUE ---------------------------------------------------------------------------------------

L = glue_data.Layout
BINARY = ["0", "1"]
ENTAILMENT = ["entailment", "not_entailment"]


class CoLA(ClassificationTask):
    """Corpus of Linguistic Acceptability: train/dev have no header (source, label, -, sentence)."""
    alt_dir_names = ("CoLA",)
    glue_name = "CoLA"
    train_layout = L(header=False, text_a=3, label=1)
    test_layout = L(header=True, text_a=1, index=0)

    def __init__(self, config, tokenizer):
        super().__init__(config, "cola", tokenizer, BINARY)

    def get_scorer(self, split="dev"):
        return classification_metrics.MCCScorer(label_names=self.label_list)


class SST(ClassificationTask):
    """Stanford Sentiment Treebank (binary)."""
    alt_dir_names = ("SST-2",)
    glue_name = "SST-2"
    train_layout = L(header=True, text_a=0, label=1)
    test_layout = L(header=True, text_a=1, index=0)

    def __init__(self, config, tokenizer):
        super().__init__(config, "sst", tokenizer, BINARY)


class MRPC(ClassificationTask):
    """Microsoft Research Paraphrase Corpus (quality, id1, id2, string1, string2)."""
    alt_dir_names = ("MRPC",)
    glue_name = "MRPC"
    unordered_pair = True
    train_layout = L(header=True, text_a=3, text_b=4, label=0)
    test_layout = L(header=True, text_a=3, text_b=4, index=0)

    def __init__(self, config, tokenizer):
        super().__init__(config, "mrpc", tokenizer, BINARY)

    def get_scorer(self, split="dev"):
        return classification_metrics.AccuracyF1Scorer(label_names=self.label_list)


class QQP(ClassificationTask):
    """Quora Question Pairs (id, qid1, qid2, question1, question2, is_duplicate)."""
    alt_dir_names = ("QQP",)
    glue_name = "QQP"
    train_layout = L(header=True, text_a=3, text_b=4, label=5)
    test_layout = L(header=True, text_a=1, text_b=2, index=0)

    def __init__(self, config, tokenizer):
        super().__init__(config, "qqp", tokenizer, BINARY)

    def get_scorer(self, split="dev"):
        return classification_metrics.AccuracyF1Scorer(label_names=self.label_list)


class STS(RegressionTask):
    """Semantic Textual Similarity Benchmark: scores 0..5 in the last column."""
    alt_dir_names = ("STS-B",)
    glue_name = "STS-B"
    unordered_pair = True
    train_layout = L(header=True, text_a=-3, text_b=-2, label=-1)
    test_layout = L(header=True, text_a=-2, text_b=-1, index=0)

    def __init__(self, config, tokenizer):
        super().__init__(config, "sts", tokenizer, 0.0, 5.0)


class MNLI(ClassificationTask):
    """Multi-Genre NLI: dev/test come as *_matched and *_mismatched; diagnostic is GLUE's AX."""
    alt_dir_names = ("MNLI",)
    glue_name = "MNLI"
    train_layout = L(header=True, text_a=8, text_b=9, label=-1)
    test_layout = L(header=True, text_a=8, text_b=9, index=0)
    diagnostic_layout = L(header=True, text_a=1, text_b=2, index=0)

    def __init__(self, config, tokenizer):
        super().__init__(config, "mnli", tokenizer, ["contradiction", "entailment", "neutral"])

    def split_file(self, split):
        # "dev" alone means matched, as in the official release.
        return ("dev_matched" if split == "dev" else split) + ".tsv"

    def layout(self, split):
        return self.diagnostic_layout if split == "diagnostic" else super().layout(split)

    def get_eval_splits(self):
        return [("dev_matched", "mnli"), ("dev_mismatched", "mnli-mm")]

    def get_test_splits(self):
        return ["test_matched", "test_mismatched", "diagnostic"]

    def submission_name(self, split):
        return {"test_matched": "MNLI-m", "test_mismatched": "MNLI-mm",
                "diagnostic": "AX"}.get(split, "MNLI")


class QNLI(ClassificationTask):
    """Question NLI (index, question, sentence, label)."""
    alt_dir_names = ("QNLI",)
    glue_name = "QNLI"
    train_layout = L(header=True, text_a=1, text_b=2, label=3)
    test_layout = L(header=True, text_a=1, text_b=2, index=0)

    def __init__(self, config, tokenizer):
        super().__init__(config, "qnli", tokenizer, ENTAILMENT)


class RTE(ClassificationTask):
    """Recognizing Textual Entailment (index, sentence1, sentence2, label)."""
    alt_dir_names = ("RTE",)
    glue_name = "RTE"
    train_layout = L(header=True, text_a=1, text_b=2, label=3)
    test_layout = L(header=True, text_a=1, text_b=2, index=0)

    def __init__(self, config, tokenizer):
        super().__init__(config, "rte", tokenizer, ENTAILMENT)


class WNLI(ClassificationTask):
    """Winograd NLI (index, sentence1, sentence2, label 0/1); not in the official release."""
    alt_dir_names = ("WNLI",)
    glue_name = "WNLI"
    train_layout = L(header=True, text_a=1, text_b=2, label=3)
    test_layout = L(header=True, text_a=1, text_b=2, index=0)

    def __init__(self, config, tokenizer):
        super().__init__(config, "wnli", tokenizer, BINARY)
