"""Featurized datasets: examples -> tfrecords (a cache) -> tf.data batches of int32/float32 features.

One list of FeatureSpecs (shared + every task's) both writes and parses the records. Each dataset
is padded to a multiple of the batch size with rows whose `task_id` is len(task_names), so every
batch has a static shape (drop_remainder) and no example is dropped; those rows carry zero loss
and are skipped in scoring (as the official release). Records hold max_seq_length positions;
each batch read is then cut to its length bucket (finetune/bucketing.py, hparam
pad_to_multiple_of), its rows and their order unchanged.

Cache: `<preprocessed_data_dir>/<tasks>_<split>_<key hash>.tfrecord` plus a `.metadata.json`
holding the full key. The key covers everything that changes the records: the content hash of
the split's data files (Task.split_files) and of the vocabulary, tokenizer type and casing,
max_seq_length, task order, task settings, a custom task's whole spec (its columns, header,
format, labels, range), example limits, batch size (padding) and the shuffle seed; a changed
setting gets a new file instead of reusing stale features. `content_key` (the key without the
batching) is what a finished trial's dev results and test outputs are keyed on. Files are written under a temporary name and renamed, metadata last, so
a crash never leaves a cache entry that looks complete.
"""
import dataclasses
import functools
import hashlib
import json
import logging
import os
import random
from typing import Any, Iterable, Sequence

import numpy as np
import tensorflow as tf

import configure_finetuning
from finetune import bucketing
from finetune import feature_spec
from finetune import task as task_lib
from util import fs
from util import io_utils
from util import preemption
from util import task_spec
from util import tf_data
from util import write_errors

log = logging.getLogger(__name__)

# Bump when the record layout or featurization code changes meaning.
FEATURE_FORMAT_VERSION = 1
# Per-epoch shuffle buffer on top of the write-time full shuffle (official: 100 after a full one).
SHUFFLE_BUFFER = 10000


def file_sha256(path: str) -> str:
    """Content hash of a file, remembered per (path, inode, size, mtime) within a process."""
    version = fs.version(path)
    return io_utils.sha256_file(path) if version is None else _sha256_of_version(*version)


@functools.lru_cache(maxsize=64)
def _sha256_of_version(path: str, inode: int, size: int, mtime_ns: int) -> str:
    return io_utils.sha256_file(path)


@dataclasses.dataclass
class PreparedData:
    """A featurized, padded split on disk."""
    path: str  # the .tfrecord file
    n_examples: int  # rows including padding (a multiple of batch_size)
    n_real: int  # rows that are examples
    batch_size: int
    key: dict = dataclasses.field(default_factory=dict)  # the cache key it was made under

    @property
    def steps_per_epoch(self) -> int:
        return self.n_examples // self.batch_size


class Preprocessor:
    """Writes, caches and reads the featurized datasets of a set of tasks."""

    def __init__(self, config: configure_finetuning.FinetuningConfig,
                 tasks: Sequence[task_lib.Task]):
        self._config = config
        self._tasks = list(tasks)
        self._name_to_task = {t.name: t for t in tasks}
        self.feature_specs = feature_spec.get_shared_feature_specs(config.max_seq_length)
        for t in tasks:
            self.feature_specs += t.get_feature_specs()
        names = [spec.name for spec in self.feature_specs]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"feature names declared twice across tasks: {duplicates}")
        self._specs_by_name = {spec.name: spec for spec in self.feature_specs}
        self._parsing_specs = {spec.name: spec.parsing_spec() for spec in self.feature_specs}
        # Every batch is cut to its length bucket after reading (the cache stays full length).
        self.trimmer = bucketing.Trimmer(config.max_seq_length, config.pad_to_multiple_of,
                                         max((t.min_sequence_length() for t in tasks), default=0))

    # -- public -----------------------------------------------------------------------------------

    def prepare_train(self) -> PreparedData:
        return self._prepare(self._tasks, "train", is_training=True)

    def prepare_predict(self, tasks: Sequence[task_lib.Task], split: str) -> PreparedData:
        return self._prepare(list(tasks), split, is_training=False)

    def train_dataset(self, data: PreparedData, seed: int, epoch: int,
                      skip_batches: int = 0) -> tf.data.Dataset:
        """Batches of one epoch, in an order fixed by (seed, epoch); skips the first batches when
        resuming mid-epoch so a resumed run sees exactly the batches an uninterrupted one would."""
        d = tf.data.TFRecordDataset(data.path)
        d = d.shuffle(min(SHUFFLE_BUFFER, data.n_examples), seed=_mix(seed, epoch),
                      reshuffle_each_iteration=False)
        d = d.map(self._decode, num_parallel_calls=tf_data.PARALLEL_CALLS)
        d = d.batch(data.batch_size, drop_remainder=True)
        if skip_batches:
            d = d.skip(skip_batches)
        return tf_data.untuned(self._cut_to_buckets(d).prefetch(tf_data.PREFETCH_BATCHES))

    def predict_dataset(self, data: PreparedData) -> tf.data.Dataset:
        d = tf.data.TFRecordDataset(data.path)
        d = d.map(self._decode, num_parallel_calls=tf_data.PARALLEL_CALLS)
        batches = self._cut_to_buckets(d.batch(data.batch_size, drop_remainder=True))
        return tf_data.untuned(batches.prefetch(tf_data.PREFETCH_BATCHES))

    def _cut_to_buckets(self, batches: tf.data.Dataset) -> tf.data.Dataset:
        """Each batch cut to its length bucket; the same batches in the same order."""
        if not self.trimmer.enabled:
            return batches
        return batches.map(self.trimmer, num_parallel_calls=tf_data.PARALLEL_CALLS)

    def padding_features(self) -> dict[str, Any]:
        """A padding row: every feature at its default, task_id = number of tasks."""
        return {"task_id": len(self._config.task_names)}

    def make_tf_example(self, features: dict[str, Any], where: str = "") -> tf.train.Example:
        unknown = sorted(set(features) - set(self._specs_by_name))
        if unknown:
            raise ValueError(f"{where}: featurize returned undeclared features {unknown}; "
                             "declare them in the task's get_feature_specs()")
        feature = {}
        for spec in self.feature_specs:
            values = features[spec.name] if spec.name in features else spec.default_values()
            try:
                feature[spec.name] = spec.to_feature(values)
            except ValueError as e:
                raise ValueError(f"{where}: {e}") from None
        return tf.train.Example(features=tf.train.Features(feature=feature))

    # -- cache ------------------------------------------------------------------------------------

    def cache_key(self, tasks: Sequence[task_lib.Task], split: str, is_training: bool) -> dict:
        return dict(self.content_key(tasks, split),
                    batch_size=self._batch_size(split, is_training),
                    shuffle_seed=self._config.seed if is_training else None)

    def content_key(self, tasks: Sequence[task_lib.Task], split: str) -> dict:
        """Everything that decides the examples and features of `split` (not their batching)."""
        c = self._config
        return {
            "format": FEATURE_FORMAT_VERSION,
            "split": split,
            "tasks": [t.name for t in tasks],
            "task_names": list(c.task_names),  # task ids are positions in this list
            "task_settings": {t.name: t.cache_key() for t in tasks},
            # A custom task's columns, header, format, labels and range (a changed text_a of the
            # same file must not reuse the old column's features).
            "custom_specs": {t.name: task_spec.without_eval_only_keys(c.custom_tasks[t.name])
                             for t in tasks
                             if isinstance(c.custom_tasks, dict) and t.name in c.custom_tasks},
            "max_examples": {t.name: t.max_examples(split) for t in tasks},
            "vocab_sha256": file_sha256(c.vocab_file) if c.vocab_file and fs.isfile(
                c.vocab_file) else None,
            # The data itself, not just the settings: an edited train.tsv is featurized anew.
            "data_sha256": {t.name: {os.path.basename(f): io_utils.sha256_file(f)
                                     for f in t.split_files(split)} for t in tasks},
            "tokenizer": "sentencepiece" if (c.vocab_file or "").endswith(".model") else "wordpiece",
            "do_lower_case": c.do_lower_case,
            "max_seq_length": c.max_seq_length,
        }

    def _batch_size(self, split: str, is_training: bool) -> int:
        """train_batch_size; predict_batch_size for test splits; eval_batch_size otherwise."""
        if is_training:
            return self._config.train_batch_size
        if split.startswith("test") or split == "diagnostic":
            return self._config.predict_batch_size
        return self._config.eval_batch_size

    def _prepare(self, tasks, split, is_training) -> PreparedData:
        key = self.cache_key(tasks, split, is_training)
        digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:12]
        name = "_".join(sorted(t.name for t in tasks)) + f"_{split}_{digest}"
        prefix = os.path.join(self._config.preprocessed_data_dir, name)
        record_path, metadata_path = prefix + ".tfrecord", prefix + ".metadata.json"
        batch_size = self._batch_size(split, is_training)
        if self._config.use_tfrecords_if_existing and fs.exists(metadata_path) and \
                fs.exists(record_path):
            metadata = io_utils.read_json(metadata_path)
            if metadata.get("key") == key:
                log.info("using cached features %s (%d examples)", record_path,
                         metadata["n_real"])
                return PreparedData(record_path, metadata["n_examples"], metadata["n_real"],
                                    batch_size, key)
            log.info("cached features %s were made with other settings; rebuilding", record_path)
        examples = []
        for t in tasks:
            task_examples = t.get_examples(split)
            log.info("%s %s: %d examples", t.name, split, len(task_examples))
            if not task_examples:  # refused before anything is cached (or divides by zero)
                raise task_lib.TaskDataError(
                    f"task {t.name}: no {split} examples in {', '.join(t.split_files(split))} "
                    "(only a header, blank lines, or max_*_examples 0?); add examples and re-run")
            examples += task_examples
        if is_training:
            # Mix tasks and examples once at write time; each epoch reshuffles a window on top.
            random.Random(self._config.seed).shuffle(examples)
        # A full or read-only disk is said of the cache file, not of its temporary.
        with write_errors.naming(record_path, "feature cache file"):
            n_examples, n_real = self._write(examples, is_training, record_path, batch_size)
        io_utils.write_json(metadata_path, {"key": key, "n_examples": n_examples,
                                            "n_real": n_real})
        return PreparedData(record_path, n_examples, n_real, batch_size, key)

    def _write(self, examples: Iterable[task_lib.Example], is_training: bool, path: str,
               batch_size: int) -> tuple[int, int]:
        fs.makedirs(os.path.dirname(fs.abspath(path)))
        tmp_path = f"{path}.tmp-{os.getpid()}"
        n = 0
        try:
            with tf.io.TFRecordWriter(tmp_path) as writer:
                for i, example in enumerate(examples):
                    preemption.check(f"featurizing {os.path.basename(path)} (example {i + 1})",
                                     "re-run the same command to featurize it")
                    task = self._name_to_task[example.task_name]
                    log_it = self._config.log_examples and i < 1
                    featurized = task.featurize(example, is_training, log_it)
                    for features in featurized if isinstance(featurized, list) else [featurized]:
                        where = f"task {task.name} example {example.eid} ({example.source})"
                        writer.write(self.make_tf_example(features, where).SerializeToString())
                        n += 1
                n_real = n
                padding = self.make_tf_example(self.padding_features(), "padding row")
                while n % batch_size:
                    writer.write(padding.SerializeToString())
                    n += 1
            fs.replace(tmp_path, path)
        except BaseException:
            if fs.exists(tmp_path):
                fs.remove(tmp_path)
            raise
        return n, n_real

    def _decode(self, record: tf.Tensor) -> dict[str, tf.Tensor]:
        example = tf.io.parse_single_example(record, self._parsing_specs)
        # tf.Example stores int64; the model (and TPUs) want int32.
        return {k: tf.cast(v, tf.int32) if v.dtype == tf.int64 else v for k, v in example.items()}


def _mix(seed: int, epoch: int) -> int:
    return int(np.random.SeedSequence([seed, epoch]).generate_state(1)[0])


def decode_batch_outputs(outputs: dict[str, np.ndarray]) -> Iterable[dict[str, np.ndarray]]:
    """Splits a batch of outputs (name -> [B, ...]) into one dict per row."""
    size = len(next(iter(outputs.values())))
    for i in range(size):
        yield {k: v[i] for k, v in outputs.items()}
