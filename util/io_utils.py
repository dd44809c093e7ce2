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

from util import file_modes, fs


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
