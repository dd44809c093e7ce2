"""The pre-training tfrecord schema: one definition for the writer and the reader.

Every record is a tf.train.Example with three int64 features of fixed length max_seq_length,
the same names and types as the official ELECTRA release, so files written by either load in
the other:

    input_ids    [CLS] A [SEP] B [SEP] then [PAD]=0 up to max_seq_length
    input_mask   1 on real tokens, 0 on padding
    segment_ids  0 for [CLS] A [SEP], 1 for B [SEP], 0 on padding

`serialize_example` writes the protobuf bytes directly and pretrain/builder/tfrecord_writer.py frames
them, so building data never imports TensorFlow (tests check the bytes parse to the same
tf.train.Example, and the files equal tf.io.TFRecordWriter's byte for byte).
`parse_pretrain_example(s)` read them back as int32 tensors (TPUs and our model want int32).

A dataset directory also holds metadata.json (written by build_pretraining_dataset.py); the
held-out evaluation shards are listed by basename under "eval_files", and the trainer must not
train on them. `split_files(data_dir)` returns the two lists.
"""
import functools
import json
import os
from typing import Sequence

from util import fs

FEATURE_NAMES = ("input_ids", "input_mask", "segment_ids")
SHARD_PREFIX = "pretrain_data.tfrecord"
METADATA_FILE = "metadata.json"
# Bumped whenever the record layout or the metadata keys change meaning.
FORMAT_VERSION = 1


def shard_name(index: int, num_shards: int) -> str:
    """Basename of shard `index` out of `num_shards`, as the official release names them."""
    return f"{SHARD_PREFIX}-{index}-of-{num_shards}"


# ---------------------------------------------------------------------------------------------
# Writing: protobuf wire format by hand. Example{features: Features{feature: map<string,
# Feature>}}; Feature{int64_list: Int64List{value: packed varints}}.

def _varint(value: int) -> bytes:
    value &= (1 << 64) - 1  # negative int64 values are written as 10-byte two's complement
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_VARINTS = [_varint(v) for v in range(1 << 15)]  # covers every id of 32k vocabularies
_TAGS = {field: bytes([(field << 3) | 2]) for field in range(1, 16)}


def _packed_varints(values: Sequence[int]) -> bytes:
    if not values:
        return b""
    low, high = min(values), max(values)
    if low >= 0 and high < 0x80:  # masks and segment ids: one byte per value
        return bytes(values)
    if low >= 0 and high < len(_VARINTS):
        return b"".join([_VARINTS[v] for v in values])
    return b"".join(_varint(int(v)) for v in values)


def _length_delimited(field_number: int, payload: bytes) -> bytes:
    """Tag (wire type 2) + length + payload; field numbers here are all < 16 (one-byte tag)."""
    n = len(payload)
    return (_TAGS[field_number] + (_VARINTS[n] if n < len(_VARINTS) else _varint(n))
            + payload)


def _feature_entry(name: str, values: Sequence[int]) -> bytes:
    int64_list = _length_delimited(1, _packed_varints(values))      # Int64List.value
    feature = _length_delimited(3, int64_list)                       # Feature.int64_list
    entry = _length_delimited(1, name.encode()) + _length_delimited(2, feature)  # map entry
    return _length_delimited(1, entry)                                # Features.feature


def serialize_example(input_ids: Sequence[int], input_mask: Sequence[int],
                      segment_ids: Sequence[int]) -> bytes:
    """Serialized tf.train.Example bytes for one pre-training example.

    Args:
      input_ids, input_mask, segment_ids: int sequences (lists or 1-D numpy arrays) of the
        same length max_seq_length.
    """
    if not len(input_ids) == len(input_mask) == len(segment_ids):
        raise ValueError(f"feature lengths differ: input_ids {len(input_ids)}, "
                         f"input_mask {len(input_mask)}, segment_ids {len(segment_ids)}")
    columns = (input_ids, input_mask, segment_ids)
    features = b"".join(_feature_entry(name, [int(v) for v in col] if not isinstance(col, list)
                                       else col)
                        for name, col in zip(FEATURE_NAMES, columns))
    return _length_delimited(1, features)                            # Example.features


# Largest id the builder may pass to serialize_unpadded(..., checked=False).
MAX_FAST_ID = len(_VARINTS) - 1


@functools.lru_cache(maxsize=16)
def _fixed_prefixes(max_seq_length: int) -> tuple[bytes, bytes, bytes]:
    """Byte prefixes that do not depend on the example: the input_ids map-entry key, and the
    whole headers of input_mask and segment_ids, whose payloads are always L one-byte varints."""
    def header(name: bytes) -> bytes:
        entry = _length_delimited(1, _length_delimited(1, name) + _length_delimited(
            2, _length_delimited(3, _length_delimited(1, bytes(max_seq_length)))))
        return entry[:-max_seq_length]
    return _length_delimited(1, b"input_ids"), header(b"input_mask"), header(b"segment_ids")


def serialize_unpadded(tokens: Sequence[int], num_first: int, max_seq_length: int,
                       checked: bool = True) -> bytes:
    """Fast path of serialize_example for the builder: the same bytes from the unpadded ids.

    Args:
      tokens: [CLS] A [SEP] (B [SEP]) as ids, at most max_seq_length of them.
      num_first: len([CLS] A [SEP]); positions after it up to len(tokens) get segment id 1.
      max_seq_length: padded length L.
      checked: False skips the id-range check; only for ids known to be in [0, MAX_FAST_ID].
    """
    n, pad = len(tokens), max_seq_length - len(tokens)
    if pad < 0 or not 0 <= num_first <= n:
        raise ValueError(f"{n} tokens with num_first={num_first} do not fit max_seq_length "
                         f"{max_seq_length}")
    zeros = bytes(pad)
    if not checked or (max(tokens, default=0) <= MAX_FAST_ID and min(tokens, default=0) >= 0):
        ids = b"".join(map(_VARINTS.__getitem__, tokens)) + zeros
    else:
        ids = _packed_varints(list(tokens)) + zeros
    ids_key, mask_header, segments_header = _fixed_prefixes(max_seq_length)
    ids_entry = _length_delimited(1, ids_key + _length_delimited(
        2, _length_delimited(3, _length_delimited(1, ids))))
    features = b"".join((
        ids_entry,
        mask_header, b"\x01" * n, zeros,
        segments_header, bytes(num_first), b"\x01" * (n - num_first), zeros))
    return _length_delimited(1, features)


def write_examples(path: str, serialized: Sequence[bytes]) -> None:
    """Writes serialized examples to a TFRecord file (directly; callers handle atomicity)."""
    from pretrain.builder import tfrecord_writer

    with tfrecord_writer.TFRecordWriter(path) as writer:
        for record in serialized:
            writer.write(record)


# ---------------------------------------------------------------------------------------------
# Reading.

def feature_spec(max_seq_length: int) -> dict:
    """name -> tf.io.FixedLenFeature([max_seq_length], tf.int64), for tf.io.parse_*example."""
    import tensorflow as tf

    return {name: tf.io.FixedLenFeature([max_seq_length], tf.int64) for name in FEATURE_NAMES}


def parse_pretrain_example(serialized, max_seq_length: int) -> dict:
    """One serialized record -> {input_ids, input_mask, segment_ids}: int32 [L]."""
    import tensorflow as tf

    parsed = tf.io.parse_single_example(serialized, feature_spec(max_seq_length))
    # tf.Example stores int64 only; the model (and TPUs) use int32.
    return {name: tf.cast(parsed[name], tf.int32) for name in FEATURE_NAMES}


def parse_pretrain_examples(serialized, max_seq_length: int) -> dict:
    """A batch of serialized records: string [B] -> {name: int32 [B, L]} (faster than per record)."""
    import tensorflow as tf

    parsed = tf.io.parse_example(serialized, feature_spec(max_seq_length))
    return {name: tf.cast(parsed[name], tf.int32) for name in FEATURE_NAMES}


# ---------------------------------------------------------------------------------------------
# Dataset metadata.

def read_metadata(data_dir: str) -> dict:
    """The metadata.json of a dataset directory written by build_pretraining_dataset.py."""
    path = os.path.join(data_dir, METADATA_FILE)
    if not fs.isfile(path):
        raise ValueError(f"{path} does not exist; build the dataset with build_pretraining_dataset.py "
                         f"or point to the directory that holds the shards")
    with fs.open(path, encoding="utf-8") as f:
        try:
            metadata = json.load(f)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}:{e.lineno}:{e.colno}: invalid JSON: {e.msg}") from None
    version = metadata.get("format_version")
    if version != FORMAT_VERSION:
        raise ValueError(f"{path} has format_version {version!r}; this code reads {FORMAT_VERSION}")
    return metadata


def split_files(data_dir: str) -> tuple[list[str], list[str]]:
    """(train shard paths, eval shard paths) of a dataset directory, from its metadata.json."""
    metadata = read_metadata(data_dir)
    eval_names = set(metadata.get("eval_files", []))
    names = [shard_name(i, metadata["num_out_files"]) for i in range(metadata["num_out_files"])]
    train = [os.path.join(data_dir, n) for n in names if n not in eval_names]
    evals = [os.path.join(data_dir, n) for n in names if n in eval_names]
    return train, evals
