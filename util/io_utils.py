"""Atomic file output: write to a temporary name in the same directory, then rename.

A crash mid-write leaves the previous file (or nothing) in place, never a torn file.

What that promises per storage (paths are local or URLs, see util/fs.py):
  - local disk (a local path or a file:// URL): the temporary is fsync'ed, then renamed over
    the target (atomic, POSIX).
  - HDFS (hdfs://): written whole to a temporary, then renamed (atomic in the namenode).
  - object stores (gs://, s3://): no rename; gfile's rename copies the temporary to the target
    object and deletes it. An object store makes an object visible only once it is complete, so
    readers still see the old content or the new, never half of it. A writer killed between the
    copy and the delete leaves a `.<name>.<pid>.*.tmp` object behind (harmless; delete it).
"""
import contextlib
import hashlib
import io
import json
import os
import re
import tempfile
import uuid
from typing import Any, Iterator

from util import file_modes, fs, write_errors


def pid_alive(pid: int) -> bool:
    """True if a process with this id exists (it may be a newer one reusing the id)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove_dead_writers_temporaries(directory: str, name: str) -> None:
    """Deletes `.<name>.<pid>.*.tmp` files whose writer process no longer exists: what a process
    killed in the middle of writing `name` left behind. Live writers' files are left alone."""
    pattern = re.compile(re.escape(f".{name}.") + r"(\d+)\.[^.]*\.tmp$")
    for path in fs.glob(os.path.join(fs.escape(directory), f".{fs.escape(name)}.*.tmp")):
        match = pattern.match(os.path.basename(path))
        if match and int(match.group(1)) != os.getpid() and not pid_alive(int(match.group(1))):
            with contextlib.suppress(OSError):
                fs.remove(path)


@contextlib.contextmanager
def atomic_open(path: str, mode: str = "w", encoding: str | None = "utf-8") -> Iterator[Any]:
    """Opens a temporary file next to `path`; renames it over `path` only if the block succeeds.

    The temporary's name carries the writer's pid, so the next write of the same file can clean
    up after a writer that was killed mid-write (on the local disk, where pids can be checked).
    """
    local = fs.local_path(path)  # a file:// URL is the local disk: fsync and rename as such
    # A full or read-only disk is reported of `path`, not of the temporary written first.
    with write_errors.naming(path):
        if local is None:
            with _url_atomic_open(path, mode, encoding) as f:
                yield f
            return
        with _local_atomic_open(local, mode, encoding) as f:
            yield f


@contextlib.contextmanager
def _url_atomic_open(path: str, mode: str, encoding: str | None) -> Iterator[Any]:
    """The content is collected in memory and written in one go to a temporary object, which is
    then renamed over `path` (see the module docstring for what that promises)."""
    directory, name = os.path.dirname(path), os.path.basename(path)
    fs.makedirs(directory)
    buffer = io.BytesIO()
    stream = buffer if "b" in mode else io.TextIOWrapper(buffer, encoding=encoding or "utf-8")
    yield stream
    stream.flush()
    tmp_path = os.path.join(directory, f".{name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        with fs.open(tmp_path, "wb") as f:
            f.write(buffer.getvalue())
        fs.replace(tmp_path, path)
    except BaseException:
        with contextlib.suppress(OSError):
            fs.remove(tmp_path)
        raise


@contextlib.contextmanager
def _local_atomic_open(path: str, mode: str, encoding: str | None) -> Iterator[Any]:
    directory = os.path.dirname(fs.abspath(path))
    fs.makedirs(directory)
    name = os.path.basename(path)
    _remove_dead_writers_temporaries(directory, name)
    fd, tmp_path = tempfile.mkstemp(prefix=f".{name}.{os.getpid()}.", suffix=".tmp", dir=directory)
    # mkstemp creates 0600 files: the result gets open()'s mode, so shared model directories
    # stay readable by their group.
    file_modes.as_plain_file(tmp_path)
    try:
        if "b" in mode:
            encoding = None
        with os.fdopen(fd, mode, encoding=encoding) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        fs.replace(tmp_path, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            fs.remove(tmp_path)
        raise


def write_text(path: str, text: str) -> None:
    with atomic_open(path, "w") as f:
        f.write(text)


def write_json(path: str, obj: Any) -> None:
    with atomic_open(path, "w") as f:
        json.dump(obj, f, indent=2, sort_keys=True)
        f.write("\n")


def json_line(record: Any) -> str:
    """One JSONL line (non-ASCII text kept readable)."""
    return json.dumps(record, ensure_ascii=False) + "\n"


def write_jsonl(path: str, records) -> None:
    with atomic_open(path, "w") as f:
        for record in records:
            f.write(json_line(record))


def read_json(path: str) -> Any:
    """Reads a JSON file; a syntax error names the file, line and column."""
    with fs.open(path, encoding="utf-8-sig") as f:
        text = f.read()
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}:{e.lineno}:{e.colno}: invalid JSON: {e.msg}") from None


def sha256_file(path: str) -> str:
    """Hex sha256 of a file's content, read in blocks."""
    digest = hashlib.sha256()
    with fs.open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def copy_file(src: str, dst: str) -> None:
    """Copies `src` to `dst` atomically (local paths or URLs, in any combination)."""
    with fs.open(src, "rb") as source, atomic_open(dst, "wb") as target:
        for block in iter(lambda: source.read(1 << 20), b""):
            target.write(block)


# -- whole directories ------------------------------------------------------------------------


def temp_dir_prefix(target: str) -> str:
    """The name prefix of the temporary directory a new `target` is built in, beside it
    (recover_dir finds what a killed command left by it)."""
    return f".{os.path.basename(target.rstrip('/'))}.tmp-"


def replace_dir(new: str, target: str) -> None:
    """Puts directory `new` (built beside `target`, named temp_dir_prefix(target) + ...) in
    place of `target`.

    Local disk (a path or a file:// URL): `target` is the old directory or the new one at every
    instant. On Linux the two are exchanged in one step (renameat2), then the old one, now under
    the temporary name, is deleted. Where there is no such call, the old one is renamed to a
    hidden `.<name>.old-*` first and the new one renamed in: a kill between the two leaves no
    `target`, and recover_dir, at the next run, puts the old one back.

    Object stores (gs://, s3://) and other URLs have no directory rename: the old directory is
    deleted, then the files are moved in one by one (each appears whole), best effort: a kill
    meanwhile leaves `target` partial or missing until the command is run again.
    """
    local_new, local_target = fs.local_path(new), fs.local_path(target)
    if local_new is None or local_target is None:
        _replace_dir_file_by_file(new, target)
    elif not fs.exists(local_target):
        fs.replace(local_new, local_target)
    elif fs.exchange(local_new, local_target):
        fs.rmtree(local_new)  # the old directory now
    else:
        old = _hidden_sibling(local_target, "old")
        fs.replace(local_target, old)
        fs.replace(local_new, local_target)
        fs.rmtree(old)


def _hidden_sibling(target: str, tag: str) -> str:
    name = os.path.basename(target.rstrip("/"))
    return os.path.join(os.path.dirname(target), f".{name}.{tag}-{uuid.uuid4().hex[:8]}")


def _replace_dir_file_by_file(new: str, target: str) -> None:
    fs.rmtree(target)
    for root, _, names in fs.walk(new):
        inner = fs.relpath(root, new) if root.rstrip("/") != new.rstrip("/") else ""
        target_dir = os.path.join(target, inner) if inner else target
        fs.makedirs(target_dir)
        for name in names:
            fs.replace(os.path.join(root, name), os.path.join(target_dir, name))
    fs.rmtree(new)


def recover_dir(target: str) -> list[str]:
    """Finishes what a killed replace_dir of local `target` left beside it: the old directory
    put back if `target` is missing (`.<name>.old-*`), and the hidden temporaries deleted (a new
    directory never put in place, or an old one exchanged out: `target` is whole either way).
    Call it holding the lock on `target`, so that no live command owns them. Returns a line per
    action, for the log."""
    local = fs.local_path(target)
    if local is None:
        return []  # URLs: nothing is renamed aside there (see replace_dir)
    name = os.path.basename(local.rstrip("/"))
    pattern = os.path.join(fs.escape(os.path.dirname(local)), f".{fs.escape(name)}.")
    done = []
    for old in sorted(fs.glob(pattern + "old-*")):
        if not fs.exists(local):
            fs.replace(old, local)
            done.append(f"put back {local}, left aside by a command killed while replacing it")
        else:
            fs.rmtree(old)
            done.append(f"deleted {old}, the replaced copy of {local}")
    for tmp in fs.glob(pattern + "tmp-*"):
        fs.rmtree(tmp)
        done.append(f"deleted {tmp}, left by a command killed while writing {local}")
    return done
