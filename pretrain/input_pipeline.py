"""tf.data input for pre-training: a deterministic, resumable stream of tfrecord batches.

Training stream. The shards are visited in "rounds": each epoch shuffles the file list (seeded by
(seed, epoch)) and cuts it into groups of `cycle_length` files; a round interleaves one group's
records, shuffles them with a buffer seeded by (seed, round), and numbers them. This is the
official pipeline's shape (shuffled files, a few read in parallel, a small shuffle buffer) made
deterministic, so the whole stream is a function of the seed and the file list.

Exact resume. Every batch carries `input_position` = (round, index within the round) of its last
example; the trainer keeps the position of the last batch it consumed in a variable that is saved
in the checkpoint. A resumed run restarts at that round and skips the records up to and including
that index (skipping unparsed records of at most one round, i.e. `cycle_length` files), then
continues exactly where the interrupted run was. No iterator state, no RNG state.

Distribution. Every input pipeline (one per worker) reads the same global batches and keeps its
own slice, then splits it among its local replicas in order, so replica r always holds examples
[r * B_r, (r + 1) * B_r) of the global batch: one device, mirrored replicas and several workers
train on identical global batches. Parsing happens after slicing, so each worker only parses
what it uses.

Held-out data. Shards listed under "eval_files" in the metadata.json beside the training shards
(written by build_pretraining_dataset.py), or those matched by `eval_tfrecords`, are excluded from
training; evaluation reads them in a fixed order.
"""
import json
import math
import os
from typing import NamedTuple

import tensorflow as tf

from pretrain import pretrain_data
from util import fs, record_check, tf_data

POSITION_KEY = "input_position"
START = (0, -1)  # position "before the first record"


class DataFiles(NamedTuple):
    train: list[str]
    eval: list[str]


def _glob_patterns(patterns: str, what: str) -> list[str]:
    """Files matching a comma-separated list of glob patterns (hparam `what`); a pattern that
    matches as a whole is taken as one (a path with a comma in it). Refuses files that are not
    TFRecords (a catch-all glob that also takes metadata.json)."""
    files = []
    parts = [patterns] if fs.glob(patterns) else patterns.split(",")
    for pattern in parts:
        pattern = pattern.strip()
        if pattern:
            files.extend(p for p in fs.glob(pattern) if fs.isfile(p))
    files = sorted({fs.abspath(f) for f in files})
    foreign = record_check.not_tfrecord_files(files)
    if foreign:
        shown = ", ".join(foreign[:5]) + (" ..." if len(foreign) > 5 else "")
        raise ValueError(f"hparam {what}={patterns!r} matches {len(foreign)} file(s) that are not "
                         f"TFRecord files: {shown}; narrow the pattern to the shards")
    return files


def _metadata_eval_files(train_files: list[str]) -> list[str]:
    """Held-out shards named by the metadata.json files beside `train_files`."""
    held_out = []
    for directory in sorted({os.path.dirname(f) for f in train_files}):
        path = os.path.join(directory, pretrain_data.METADATA_FILE)
        if not fs.isfile(path):
            continue
        try:
            with fs.open(path, encoding="utf-8") as f:
                metadata = json.load(f)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}:{e.lineno}:{e.colno}: invalid JSON: {e.msg}") from None
        names = metadata.get("eval_files", []) if isinstance(metadata, dict) else None
        if not isinstance(names, list):
            raise ValueError(f"{path}: 'eval_files' must be a list of shard names")
        held_out += [fs.abspath(os.path.join(directory, n)) for n in names]
    return held_out


def find_files(pretrain_tfrecords: str, eval_tfrecords: str | None = None) -> DataFiles:
    """Training and held-out shards: `eval_tfrecords`, else metadata.json's "eval_files"."""
    matched = _glob_patterns(pretrain_tfrecords, "pretrain_tfrecords")
    if eval_tfrecords:
        held_out = _glob_patterns(eval_tfrecords, "eval_tfrecords")
    else:
        held_out = [f for f in _metadata_eval_files(matched) if fs.isfile(f)]
    held = {fs.place(f) for f in held_out}  # however each pattern spells the directory
    train = [f for f in matched if fs.place(f) not in held]
    if not train:
        why = "no file matches it" if not matched else "every match is a held-out eval shard"
        raise ValueError(f"no training data: hparam pretrain_tfrecords={pretrain_tfrecords!r} "
                         f"({why}); build data with build_pretraining_dataset.py")
    if not any(fs.getsize(f) > 0 for f in train):
        raise ValueError(f"every training shard matching {pretrain_tfrecords!r} is empty")
    return DataFiles(train, sorted(held))


def _worker_slice(input_context: tf.distribute.InputContext | None, global_batch_size: int):
    """(start, size, per-replica size) of this input pipeline's part of a global batch."""
    if input_context is None:
        return 0, global_batch_size, global_batch_size
    pipelines = input_context.num_input_pipelines
    replicas = input_context.num_replicas_in_sync
    if global_batch_size % replicas:
        raise ValueError(f"batch size {global_batch_size} is not divisible by the {replicas} "
                         "replicas")
    size = global_batch_size // pipelines
    return input_context.input_pipeline_id * size, size, global_batch_size // replicas


def _finish(batches: tf.data.Dataset, max_seq_length: int, input_context, global_batch_size):
    """Global batches of (position [B, 2], record [B]) -> this pipeline's parsed replica batches."""
    start, size, per_replica = _worker_slice(input_context, global_batch_size)

    def parse(positions, records):
        features = pretrain_data.parse_pretrain_examples(records[start:start + size],
                                                         max_seq_length)
        features[POSITION_KEY] = tf.tile(positions[-1:], [size, 1])
        return features

    ds = batches.map(parse, num_parallel_calls=tf_data.PARALLEL_CALLS, deterministic=True)
    if per_replica != size:
        ds = ds.rebatch(per_replica, drop_remainder=True)
    return tf_data.untuned(ds.prefetch(tf_data.PREFETCH_BATCHES))


def train_dataset(files: list[str], *, seed: int, global_batch_size: int, max_seq_length: int,
                  cycle_length: int = 4, shuffle_buffer_size: int = 100,
                  start_position=START,
                  input_context: tf.distribute.InputContext | None = None) -> tf.data.Dataset:
    """The endless training stream, resumed after `start_position` = (round, index).

    Elements: {input_ids, input_mask, segment_ids: int32 [B_r, L], input_position: int64 [B_r, 2]}
    with B_r the per-replica batch (the global batch without distribution).
    """
    files = sorted(files)
    num_files = len(files)
    cycle = max(1, min(cycle_length, num_files))
    rounds_per_epoch = math.ceil(num_files / cycle)
    first_round, first_index = (int(v) for v in start_position)
    file_table = tf.constant(files)

    def one_round(round_id):
        epoch = round_id // rounds_per_epoch
        within = round_id % rounds_per_epoch
        order = tf.argsort(tf.random.stateless_uniform(
            [num_files], seed=tf.stack([tf.constant(seed, tf.int64), epoch]), alg="philox"))
        group = tf.gather(file_table, order)[within * cycle:(within + 1) * cycle]
        records = tf.data.Dataset.from_tensor_slices(group).interleave(
            tf.data.TFRecordDataset, cycle_length=cycle, block_length=1,
            num_parallel_calls=cycle, deterministic=True)
        shuffle_seed = tf.bitwise.bitwise_xor(
            tf.constant(seed, tf.int64) * 1_000_003, round_id + 1)
        records = records.shuffle(shuffle_buffer_size, seed=shuffle_seed,
                                  reshuffle_each_iteration=False)
        numbered = records.enumerate().map(
            lambda index, record: (tf.stack([round_id, index]), record))
        skip = tf.where(tf.equal(round_id, first_round), tf.cast(first_index + 1, tf.int64),
                        tf.constant(0, tf.int64))
        return numbered.skip(skip)

    rounds = tf.data.Dataset.range(first_round, 2 ** 62)
    stream = rounds.flat_map(one_round)
    batches = stream.batch(global_batch_size, drop_remainder=True)
    return _finish(batches, max_seq_length, input_context, global_batch_size)


def eval_dataset(files: list[str], *, global_batch_size: int, max_seq_length: int,
                 num_batches: int,
                 input_context: tf.distribute.InputContext | None = None) -> tf.data.Dataset:
    """`num_batches` held-out batches in file order (repeating the files if they are short)."""
    if not files:
        raise ValueError("no held-out data to evaluate on: set hparam eval_tfrecords or build the "
                         "data with held-out shards (metadata.json 'eval_files')")
    records = tf.data.TFRecordDataset(sorted(files)).repeat()
    numbered = records.enumerate().map(
        lambda index, record: (tf.stack([tf.constant(0, tf.int64), index]), record))
    batches = numbered.batch(global_batch_size, drop_remainder=True).take(num_batches)
    return _finish(batches, max_seq_length, input_context, global_batch_size)


def count_records(files: list[str]) -> int:
    """Number of records in `files` (reads them; meant for the small held-out set)."""
    if not files:
        return 0
    return int(tf_data.records(sorted(files)).reduce(
        tf.constant(0, tf.int64), lambda n, _: n + 1))
