"""Atomic file output: write to a temporary name in the same directory, then rename.

A crash mid-write leaves the previous file (or nothing) in place, never a torn file.
"""
import contextlib
import glob
import hashlib
import json
import os
import re
import tempfile
from typing import Any, Iterator


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
    for path in glob.glob(os.path.join(glob.escape(directory), f".{glob.escape(name)}.*.tmp")):
        match = pattern.match(os.path.basename(path))
        if match and int(match.group(1)) != os.getpid() and not pid_alive(int(match.group(1))):
            with contextlib.suppress(OSError):
                os.remove(path)


@contextlib.contextmanager
def atomic_open(path: str, mode: str = "w", encoding: str | None = "utf-8") -> Iterator[Any]:
    """Opens a temporary file next to `path`; renames it over `path` only if the block succeeds.

    The temporary's name carries the writer's pid, so the next write of the same file can clean
    up after a writer that was killed mid-write.
    """
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    name = os.path.basename(path)
    _remove_dead_writers_temporaries(directory, name)
    fd, tmp_path = tempfile.mkstemp(prefix=f".{name}.{os.getpid()}.", suffix=".tmp", dir=directory)
    # mkstemp creates 0600 files; give the result the usual mode (0666 minus the umask) so shared
    # model directories stay readable by their group.
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp_path, 0o666 & ~umask)
    try:
        if "b" in mode:
            encoding = None
        with os.fdopen(fd, mode, encoding=encoding) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp_path, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.remove(tmp_path)
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
    with open(path, encoding="utf-8") as f:
        text = f.read()
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}:{e.lineno}:{e.colno}: invalid JSON: {e.msg}") from None


def sha256_file(path: str) -> str:
    """Hex sha256 of a file's content, read in blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
