"""Which training tfrecords a pre-training run's data position belongs to.

A checkpoint's `input_position` (round, index) is a place in a stream that is a function of the
seed and the training file list (pretrain/input_pipeline.py). On other files the same position
is somewhere else: examples would be skipped or seen twice without a word. So the model dir keeps
RECORD_FILE, the identity of the files the run trains on:

    {"files": {name: {"bytes": size, "ends_sha256": hash of its first and last 4 KiB}},
     "metadata_sha256": ...,
     "data_seed": seed of the data order, "since_step": step the record took effect at}

Names are relative to the files' common directory (a moved data dir is the same data); the
metadata.json beside them, when there is one, is hashed whole (a rebuild rewrites it). Reading
4 KiB at both ends costs a resume 8 KiB per shard, not the shards (tens of GB); an edit inside
a shard that keeps its size and both ends is not seen.

Resuming on changed files is refused (`check`), unless hparam resume_on_changed_data: then the
run continues from its checkpoint's weights, optimizer and step on a new data order (`rekey`):
the new files' stream from its start, seeded by (seed, step), so it differs from the run's first
epoch. `since_step` makes that kill-safe: a checkpoint at that step predates the change, so its
position is reset whenever it is resumed. The record's data_seed also keeps the data order
when hparam seed changes on resume (masking and dropout follow the new seed).
"""
import hashlib
import os

from util import fs, io_utils, resume

RECORD_FILE = "training_data.json"
_PROBE_BYTES = 4096


class ChangedDataError(ValueError):
    """The training tfrecords differ from the ones the model dir's checkpoints were trained on."""


def _probe(path: str) -> str:
    size = fs.getsize(path)
    digest = hashlib.sha256()
    with fs.open(path, "rb", encoding=None) as f:
        digest.update(f.read(_PROBE_BYTES))
        if size > _PROBE_BYTES:
            f.seek(max(_PROBE_BYTES, size - _PROBE_BYTES))
            digest.update(f.read(_PROBE_BYTES))
    return digest.hexdigest()


def _common_dir(files: list[str]) -> str:
    """The deepest directory holding every file, by "/"-separated parts (URLs keep their
    "scheme://", which os.path.commonpath would fold)."""
    common = []
    for parts in zip(*(os.path.dirname(f).split("/") for f in files)):
        if len(set(parts)) > 1:
            break
        common.append(parts[0])
    return "/".join(common)


def identity(files: list[str]) -> dict:
    """{"files": ..., "metadata_sha256": ...} of the training shards `files`."""
    root = _common_dir(files)
    out = {"files": {p[len(root):].lstrip("/"): {"bytes": fs.getsize(p),
                                                  "ends_sha256": _probe(p)}
                     for p in sorted(files)}}
    metadata = os.path.join(root, "metadata.json")
    if fs.isfile(metadata):
        out["metadata_sha256"] = io_utils.sha256_file(metadata)
    return out


def path(model_dir: str) -> str:
    return os.path.join(model_dir, RECORD_FILE)


def read(model_dir: str) -> dict | None:
    """The model dir's record, None when it has none; ValueError naming it when malformed."""
    if not fs.exists(path(model_dir)):
        return None
    record = io_utils.read_json(path(model_dir))
    if not (isinstance(record, dict) and isinstance(record.get("files"), dict)
            and isinstance(record.get("data_seed"), int)
            and isinstance(record.get("since_step"), int)):
        raise ValueError(f"{path(model_dir)} is not a record of training tfrecords (files, "
                         "data_seed, since_step); delete it to resume without comparing the "
                         "data")
    return record


def fresh(files: list[str], seed: int) -> dict:
    """The record of a run that starts on `files` (or of one that predates records)."""
    return dict(identity(files), data_seed=seed, since_step=0)


def changes(saved: dict, current: dict) -> list[str]:
    """What differs between two identities, one change a line: "shard-4: added",
    "shard-1.bytes: 100 -> 80", "shard-2.ends_sha256: content changed"."""
    keys = ("files", "metadata_sha256")
    found = resume.key_changes({k: saved.get(k) for k in keys}, {k: current.get(k) for k in keys})
    return [c[len("files."):] if c.startswith("files.") else c for c in found]


def rekey(saved: dict, files: list[str], seed: int, step: int) -> dict:
    """The record of a run continuing at `step` on the changed `files`: a new data order."""
    data_seed = (seed + 7919 * (step + 1)) % (2 ** 31 - 1)
    if data_seed == saved.get("data_seed"):
        data_seed = (data_seed + 1) % (2 ** 31 - 1)
    return dict(identity(files), data_seed=data_seed, since_step=step)


def check(model_dir: str, files: list[str], seed: int, step: int, allow_change: bool
          ) -> tuple[dict, list[str]]:
    """The record a run resuming at `step` continues under, and the changes it was keyed anew
    for (empty when none); raises ChangedDataError on changed files without `allow_change`."""
    saved = read(model_dir)
    if saved is None:  # a model dir of an earlier version: nothing to compare with
        return fresh(files, seed), []
    found = changes(saved, identity(files))
    if not found:
        return saved, []
    if not allow_change:
        shown = "; ".join(found[:6]) + (f"; ... ({len(found)} in all)" if len(found) > 6 else "")
        raise ChangedDataError(
            f"model dir {model_dir} was trained to step {step} on other training tfrecords "
            f"({shown}; compared with {path(model_dir)}): its data position does not apply "
            "to these. Restore the data to resume exactly, or set \"resume_on_changed_data\": "
            "true to continue on a new data order, or start a new model_name from "
            "init_checkpoint")
    return rekey(saved, files, seed, step), found
