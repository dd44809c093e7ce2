"""Name-based checkpoints in the TF1 format, readable by tf.train.list_variables / load_checkpoint.

Keys are plain variable names (`electra/encoder/layer_0/attention/self/query/kernel`,
`global_step`, ...) exactly as the official release writes them, so tools that read official
checkpoints read ours and official checkpoints load here. Writes are atomic: tensors go to a
temporary prefix that is renamed into place, and the `checkpoint` state file is updated last.
A checkpoint that cannot be read back (torn by a crash, truncated) is reported and skipped in
favour of the previous one.

The directory may be a URL (gs://, s3://, hdfs://; util/fs.py). The index file stays the commit
point there too: data shards are renamed into place before the index, and a prefix without an
index is ignored. On object stores each rename is a copy then a delete, so a killed save may
leave temporaries or index-less shards, which the next save removes.
"""
import contextlib
import logging
import os
import re
from typing import Callable, Iterable, Mapping, NamedTuple, TypeVar

import numpy as np
import tensorflow as tf

from util import fs, io_utils, write_errors

log = logging.getLogger(__name__)

STATE_FILE = "checkpoint"
# Reads of a directory's newest checkpoint retried after a save pruned the one chosen.
_READ_ATTEMPTS = 5

T = TypeVar("T")


class CheckpointWriteError(OSError):
    """A checkpoint could not be written (disk full, read-only dir); nothing older was touched."""


class UnreadableCheckpointsError(ValueError):
    """A directory holds checkpoints but none of them reads back."""


def check_path(path: str, what: str = "checkpoint path") -> None:
    """Refuses a checkpoint path TensorFlow cannot read back: its reader takes '[' in a prefix
    for a glob pattern and then finds nothing (saving works; every restore would fail)."""
    if "[" in fs.abspath(path):
        raise ValueError(f"{what} {path} contains '[': TensorFlow's checkpoint reader takes it "
                         "for a glob pattern and cannot read checkpoints there; use a path "
                         "without '['")


def checkpoint_name(variable: "tf.Variable | str") -> str:
    """The name a variable is saved under: its tf name (or a name) without the ':0' suffix."""
    name = variable if isinstance(variable, str) else variable.name
    return re.sub(r":\d+$", "", name)


def _files_of(prefix: str) -> list[str]:
    return sorted(fs.glob(fs.escape(prefix) + ".index") +
                  fs.glob(fs.escape(prefix) + ".data-*"))


def save_tensors(prefix: str, tensors: Mapping[str, tf.Tensor | np.ndarray]) -> str:
    """Writes `tensors` (name -> value) as checkpoint `prefix`, atomically."""
    check_path(prefix)
    directory = os.path.dirname(fs.abspath(prefix))
    fs.makedirs(directory)
    tmp_prefix = os.path.join(directory, f".tmp-{os.getpid()}-{os.path.basename(prefix)}")
    names = sorted(tensors)
    values = [tf.convert_to_tensor(tensors[n]) for n in names]
    try:
        with tf.device("/cpu:0"):
            tf.raw_ops.SaveV2(prefix=tmp_prefix, tensor_names=names,
                              shape_and_slices=[""] * len(names), tensors=values)
        # Data shards first, index last: a prefix with an index is complete.
        tmp_files = _files_of(tmp_prefix)
        for path in sorted(tmp_files, key=lambda p: p.endswith(".index")):
            fs.replace(path, prefix + path[len(tmp_prefix):])
    except (OSError, tf.errors.OpError) as e:
        # Disk full, read-only, quota: free what the attempt took, keep older checkpoints.
        for path in _files_of(tmp_prefix):
            with contextlib.suppress(OSError):
                fs.remove(path)
        # Said of the checkpoint, never of the temporary it is written as first.
        code, reason = write_errors.reason(e, prefix)
        raise CheckpointWriteError(
            f"cannot write checkpoint {prefix}: {reason} ("
            f"{write_errors.ADVICE.get(code, 'disk full or read-only?')}); existing checkpoints "
            "are left as they were") from None
    return prefix


def read_all(path: str) -> dict[str, np.ndarray]:
    """Every tensor of a checkpoint (prefix, or a directory's newest), as numpy arrays."""
    return _read_path(path, _tensors_of)[1]


def _tensors_of(prefix: str) -> dict[str, np.ndarray]:
    reader = load(prefix)
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}


def _read_path(path: str, read: Callable[[str], T]) -> tuple[str, T]:
    """read_newest for a prefix or a directory (its newest readable checkpoint)."""
    directory = path if fs.isdir(path) else None
    return read_newest(resolve(path), directory, read)


def read_newest(prefix: str, directory: str | None, read: Callable[[str], T]) -> tuple[str, T]:
    """(the prefix read, read(prefix)).

    `prefix` was chosen as the newest checkpoint of `directory` (None: the user named it). A
    run training there prunes its oldest checkpoints at each save (keep_checkpoint_max), which
    can remove the chosen one between choosing and reading, from a reader started a while
    ago: then the then-newest one is read. Checkpoints are immutable once written, so each
    read is of one complete checkpoint. A named checkpoint that vanishes is an error saying so.
    """
    for _ in range(_READ_ATTEMPTS):
        try:
            return prefix, read(prefix)
        except (FileNotFoundError, tf.errors.OpError):
            if fs.exists(prefix + ".index"):
                raise  # still there: not pruned, a real error
            if directory is None:
                raise FileNotFoundError(
                    f"checkpoint {prefix} was deleted while it was being read (a run training "
                    "in its directory prunes old checkpoints, keep_checkpoint_max); pass a "
                    "newer checkpoint, or the directory for its newest") from None
        log.info("checkpoint %s was pruned by a save in %s while being read; reading the "
                 "newest one", prefix, directory)
        prefix = resolve(directory)
    raise FileNotFoundError(f"{directory}: its newest checkpoint was pruned {_READ_ATTEMPTS} "
                            "times while being read (saves faster than a read?); try again")


def load(prefix: str):
    """A reader of checkpoint `prefix` (tf.train.load_checkpoint without its directory lookup,
    which ram:// answers wrongly for a prefix)."""
    return tf.compat.v1.train.NewCheckpointReader(prefix)


def is_readable(prefix: str) -> tuple[bool, str]:
    """Whether every tensor of the checkpoint reads back; else (False, the reason)."""
    if not fs.exists(prefix + ".index"):
        return False, "index file missing"
    try:
        reader = load(prefix)
        for name in reader.get_variable_to_shape_map():
            reader.get_tensor(name)
    except Exception as e:  # noqa: BLE001 -- the reader raises several types on torn files
        return False, str(e).splitlines()[0][:200]
    return True, ""


def _state_paths(directory: str) -> list[str]:
    try:
        state = tf.train.get_checkpoint_state(directory)
    except Exception as e:  # noqa: BLE001 -- an empty or garbled state file raises ValueError,
        # text-format ParseError or an OpError; the index files on disk are still usable.
        log.warning("checkpoint state file in %s is unreadable (%s); looking at the checkpoint "
                    "files themselves", directory, str(e).splitlines()[0][:200])
        return []
    if state is None:
        # TensorFlow skips a garbled state file with a warning of its own logger, which the
        # quiet console hides: say it ourselves.
        if fs.exists(os.path.join(directory, "checkpoint")):
            log.warning("checkpoint state file in %s is unreadable (not a checkpoint state); "
                        "looking at the checkpoint files themselves", directory)
        return []
    paths = list(state.all_model_checkpoint_paths) or [state.model_checkpoint_path]
    # Released checkpoints' state files name where they were written (often gs://...); a
    # checkpoint is looked for next to the state file whenever that path is not local.
    return [p if (os.path.isabs(p) or fs.is_url(p)) and fs.exists(p + ".index")
            else os.path.join(directory, os.path.basename(p)) for p in paths]


def _candidates(directory: str) -> list[str]:
    """Complete checkpoints (those with an index file) in `directory`, newest step first."""
    candidates = _state_paths(directory)
    # Also consider complete checkpoints the state file does not list (a crash between rename
    # and state update).
    for index in fs.glob(os.path.join(fs.escape(directory), "*.index")):
        prefix = index[:-len(".index")]
        if not os.path.basename(prefix).startswith(".tmp-") and prefix not in candidates:
            candidates.append(prefix)
    candidates = [p for p in candidates if fs.exists(p + ".index")]
    return sorted(candidates, key=_step_of, reverse=True)


def latest_valid(directory: str, strict: bool = False) -> str | None:
    """Newest checkpoint in `directory` that reads back; corrupt newer ones are reported.

    strict: when the directory holds checkpoints but none reads back, raise
    UnreadableCheckpointsError instead of returning None (resuming would silently restart
    from step 0 and later prune them).
    """
    check_path(directory, "checkpoint directory")
    for _ in range(_READ_ATTEMPTS):
        prefix, reasons, pruned = _newest_readable(directory)
        if not pruned:
            break
        # A save there pruned the one being checked: its newer ones are listed afresh rather
        # than falling back to older ones, which that save pruned first.
        log.info("checkpoint %s was pruned while being checked; listing %s again", pruned,
                 directory)
    if prefix is not None:
        return prefix
    if strict and reasons:
        raise UnreadableCheckpointsError(
            f"{directory} holds {len(reasons)} checkpoint(s) but none reads back ("
            + "; ".join(reasons[:3]) + "). Refusing to start again from step 0: move them "
            "away (or use another model dir) to start afresh")
    return None


def _newest_readable(directory: str) -> tuple[str | None, list[str], str | None]:
    """(newest readable checkpoint, why newer ones are unreadable, a candidate pruned while
    being checked: then the listing is stale)."""
    reasons = []
    for prefix in _candidates(directory):
        ok, reason = is_readable(prefix)
        if ok:
            return prefix, reasons, None
        if not fs.exists(prefix + ".index"):
            return None, reasons, prefix
        reasons.append(f"{os.path.basename(prefix)}: {reason}")
        log.warning("checkpoint %s is unreadable (%s); falling back to an older one", prefix,
                    reason)
    return None, reasons, None


def _step_of(prefix: str) -> int:
    match = re.search(r"-(\d+)$", prefix)
    return int(match.group(1)) if match else -1


def resolve(path: str) -> str:
    """A checkpoint prefix from a prefix or a directory (its newest readable checkpoint)."""
    check_path(path)
    if fs.isdir(path):
        prefix = latest_valid(path)
        if prefix is None:
            raise FileNotFoundError(f"no readable checkpoint in directory {path}")
        return prefix
    if not fs.exists(path + ".index"):
        raise FileNotFoundError(f"checkpoint {path} not found (no {path}.index)")
    return path


class RestoreReport(NamedTuple):
    path: str
    restored: list[str]
    missing: list[str]  # wanted by the model, absent from the checkpoint
    unused: list[str]  # in the checkpoint, not wanted by the model


def restore(variables: Mapping[str, tf.Variable], path: str,
            allow_missing: bool = False) -> RestoreReport:
    """Assigns checkpoint values to `variables` (name -> variable) by name.

    A shape mismatch is an error naming the variable and both shapes; missing names are an error
    listing them unless `allow_missing`.
    """
    return _read_path(path, lambda prefix: _restore_from(variables, prefix, allow_missing))[1]


def _restore_from(variables: Mapping[str, tf.Variable], prefix: str,
                  allow_missing: bool) -> RestoreReport:
    reader = load(prefix)
    shapes = reader.get_variable_to_shape_map()
    missing = sorted(n for n in variables if n not in shapes)
    if missing and not allow_missing:
        shown = ", ".join(missing[:20]) + (" ..." if len(missing) > 20 else "")
        raise ValueError(f"checkpoint {prefix} lacks {len(missing)} variables the model needs: "
                         f"{shown}")
    restored = []
    for name, variable in variables.items():
        if name not in shapes:
            continue
        if list(shapes[name]) != variable.shape.as_list():
            raise ValueError(
                f"checkpoint {prefix}: variable {name} has shape {list(shapes[name])} but the "
                f"model expects {variable.shape.as_list()} (a checkpoint of another model size "
                "or vocabulary?)")
        variable.assign(tf.cast(reader.get_tensor(name), variable.dtype))
        restored.append(name)
    unused = sorted(set(shapes) - set(variables))
    return RestoreReport(prefix, sorted(restored), missing, unused)


class CheckpointManager:
    """Saves numbered checkpoints `<dir>/model.ckpt-<step>` and keeps the newest `max_to_keep`
    (0 keeps them all, as tf.train.Saver); the checkpoint just saved is always kept."""

    def __init__(self, directory: str, max_to_keep: int = 5, basename: str = "model.ckpt"):
        if isinstance(max_to_keep, bool) or not isinstance(max_to_keep, int) or max_to_keep < 0:
            raise ValueError(f"max_to_keep must be an int >= 0 (0 keeps every checkpoint), got "
                             f"{max_to_keep!r}")
        check_path(directory, "checkpoint directory")
        self.directory = directory
        self.max_to_keep = max_to_keep
        self.basename = basename

    def save(self, tensors: Mapping[str, tf.Tensor | np.ndarray], step: int) -> str:
        prefix = os.path.join(self.directory, f"{self.basename}-{int(step)}")
        save_tensors(prefix, tensors)
        # Complete checkpoints on disk count too: one written just before a crash is complete
        # but missing from the state file, and would otherwise never be pruned.
        others = sorted((p for p in set(_state_paths(self.directory)) | set(self._own_prefixes())
                         if p != prefix and fs.exists(p + ".index")), key=_step_of)
        # The checkpoint just written is kept whatever the others' steps (a run resumed from an
        # older one after a damaged newer one must not prune its own save).
        room = len(others) if self.max_to_keep == 0 else self.max_to_keep - 1
        cut = max(0, len(others) - room)
        stale, kept = others[:cut], others[cut:] + [prefix]
        # The TF `checkpoint` state file (text proto), written atomically; paths relative.
        lines = [f'model_checkpoint_path: "{os.path.basename(prefix)}"']
        lines += [f'all_model_checkpoint_paths: "{os.path.basename(p)}"' for p in kept]
        io_utils.write_text(os.path.join(self.directory, STATE_FILE), "\n".join(lines) + "\n")
        for old in stale:
            # Index first: a half-pruned checkpoint is then an incomplete one, never a torn one.
            for path in sorted(_files_of(old), key=lambda p: not p.endswith(".index")):
                fs.remove(path)
        self._remove_crash_debris(kept)
        return prefix

    def _own_prefixes(self) -> list[str]:
        pattern = os.path.join(fs.escape(self.directory), fs.escape(self.basename) + "-*.index")
        return [p[:-len(".index")] for p in fs.glob(pattern)]

    def _remove_crash_debris(self, kept: list[str]) -> None:
        """Files a killed save left behind: temporaries of dead processes and data shards of
        older steps without an index (a crash between the two renames)."""
        newest = _step_of(kept[-1])
        for path in fs.glob(os.path.join(fs.escape(self.directory),
                                         f".tmp-*-{fs.escape(self.basename)}-*")):
            match = re.match(r"\.tmp-(\d+)-", os.path.basename(path))
            # On a URL the writer may have run on another host: only one process saves into a
            # directory (the run lock), so any other pid's temporary is debris.
            if match and int(match.group(1)) != os.getpid() and (
                    fs.is_url(path) or not io_utils.pid_alive(int(match.group(1)))):
                with contextlib.suppress(OSError):
                    fs.remove(path)
        # Temporaries of the state file (io_utils.atomic_open) of a process killed mid-write;
        # ours was renamed into place already, and only one process saves into a directory.
        for path in fs.glob(os.path.join(fs.escape(self.directory), f".{STATE_FILE}.*.tmp")):
            with contextlib.suppress(OSError):
                fs.remove(path)
        for path in fs.glob(os.path.join(fs.escape(self.directory),
                                         fs.escape(self.basename) + "-*.data-*")):
            prefix = path[:path.rindex(".data-")]
            if not fs.exists(prefix + ".index") and _step_of(prefix) < newest:
                with contextlib.suppress(OSError):
                    fs.remove(path)

    def latest(self) -> str | None:
        """Newest readable checkpoint; UnreadableCheckpointsError if there are only bad ones."""
        if not fs.isdir(self.directory):
            return None
        return latest_valid(self.directory, strict=True)


def by_name(variables: Iterable[tf.Variable]) -> dict[str, tf.Variable]:
    """name -> variable, refusing duplicate names (they would overwrite each other on disk)."""
    result: dict[str, tf.Variable] = {}
    for v in variables:
        name = checkpoint_name(v)
        if name in result and result[name] is not v:
            raise ValueError(f"two different variables are named {name}")
        result[name] = v
    return result


def assign_by_name(targets: Iterable[tf.Variable], sources: Iterable[tf.Variable]) -> None:
    """Gives every variable of `targets` the value of the `sources` variable of its checkpoint
    name (a model re-initialised in place from a freshly built twin; KeyError if one is missing)."""
    values = by_name(sources)
    for name, variable in by_name(targets).items():
        variable.assign(values[name])
