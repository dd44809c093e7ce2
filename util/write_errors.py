"""Failures to write an output, said in terms of that output.

Outputs are written through temporaries beside them (util/io_utils.atomic_open's
`.<name>.<pid>.*.tmp`, checkpoints' `.tmp-<pid>-<prefix>`, tfrecord shards and feature caches,
export directories built as `.<name>.tmp-*`): an error raised while writing one names the
temporary, a name the user never gave and that is gone by the time they look. `naming(path)`
turns such an error into OutputWriteError naming `path` (errno kept) with what to do;
`check_writable` refuses, before any work, an output whose directory cannot be written, so a
long run does not fail at its end on a results path it could never write.
"""
import contextlib
import errno
import os
import sys
import uuid
from typing import Iterator

from util import fs

# What a failed write most often means, and what to do about it.
ADVICE = {
    errno.ENOSPC: "the disk is full: free space or write elsewhere",
    errno.EDQUOT: "the disk quota is used up: free space or write elsewhere",
    errno.EFBIG: "the file is larger than this process may write (ulimit -f?)",
    errno.EROFS: "the file system is read-only: write elsewhere",
    errno.EACCES: "no permission to write there: write elsewhere, or change its permissions",
    errno.EPERM: "no permission to write there: write elsewhere, or change its permissions",
}
# TensorFlow's C++ file layer reports these as text in an OpError, without an errno.
_BY_TEXT = {os.strerror(code): code for code in ADVICE}


class OutputWriteError(OSError):
    """OSError(errno, strerror, path) whose message names the output and what to do."""

    def __init__(self, code: int | None, strerror: str, path: str, what: str = "",
                 where: str = ""):
        super().__init__(code, strerror, path)
        self.what, self.where = what, where  # e.g. "hparam 'results_json'"; "directory /x"

    def __str__(self) -> str:
        name = f"{self.what} {self.filename}" if self.what else str(self.filename)
        notes = [self.where] if self.where else []
        notes += [ADVICE[self.errno]] if self.errno in ADVICE else []
        return f"cannot write {name}: {self.strerror}" + (f" ({'; '.join(notes)})" if notes
                                                          else "")

    def __reduce__(self):  # crosses process boundaries (the builder's workers) whole
        return type(self), (self.errno, self.strerror, self.filename, self.what, self.where)


def is_temporary_of(candidate: str, path: str) -> bool:
    """True when `candidate`, or a directory above it, is a temporary `path` is written through
    (every writer here names them after the output and 'tmp')."""
    name = os.path.basename(str(path).rstrip("/"))
    parts = str(candidate).rstrip("/").split("/")
    return bool(name) and any(name in part and "tmp" in part and part != name for part in parts)


def _op_error_types() -> tuple:
    tf = sys.modules.get("tensorflow")  # not imported: no OpError can have been raised
    return (tf.errors.OpError,) if tf is not None else ()


def reason(error: BaseException, path: str = "") -> tuple[int | None, str]:
    """(errno or None, the reason in words) of a failed write, without temporary names."""
    if isinstance(error, OSError) and error.strerror:
        return error.errno, error.strerror
    text = getattr(error, "message", None) or str(error)
    for words, code in _BY_TEXT.items():
        if words in text:
            return code, words
    line = text.strip().splitlines()[0] if text.strip() else type(error).__name__
    return None, " ".join(path if path and is_temporary_of(word, path) else word
                          for word in line.split(" "))[-300:]


def _about(error: OSError, path: str) -> bool:
    """Whether an OSError raised while `path` was written is a failure to write it (not, say,
    of reading an input inside the same block)."""
    names = [n for n in (error.filename, error.filename2) if n is not None]
    if not names:
        return error.errno in ADVICE  # a write() or flush() of the output's own file
    target = fs.abspath(path) if not fs.is_url(path) else str(path)
    return any(str(n) == str(path) or is_temporary_of(str(n), path)
               or target.startswith(str(n).rstrip("/") + "/") for n in names)


def error_for(error: BaseException, path: str, what: str = "") -> OutputWriteError:
    """`error` (raised writing `path`) as an OutputWriteError naming `path`."""
    if isinstance(error, OutputWriteError):
        return OutputWriteError(error.errno, error.strerror, path, what or error.what,
                                error.where)
    code, words = reason(error, path)
    names = [n for n in (getattr(error, "filename", None), getattr(error, "filename2", None))
             if n is not None and str(n) != str(path) and not is_temporary_of(str(n), path)]
    return OutputWriteError(code, words, path, what, f"at {names[0]}" if names else "")


@contextlib.contextmanager
def naming(path: str, what: str = "") -> Iterator[None]:
    """Errors of writing `path` inside the block (an OSError or a TensorFlow OpError about it or
    a temporary of it, or a write() failing for lack of space or permission) raised as
    OutputWriteError naming `path`; anything else (reading an input, say) passes unchanged."""
    try:
        yield
    except OutputWriteError as e:  # said already, of `path` or of a file in its temporary
        about_path = str(e.filename) == str(path)
        if (about_path and (e.what or not what)) or not (
                about_path or is_temporary_of(str(e.filename), path)):
            raise
        raise error_for(e, path, what) from None
    except OSError as e:
        if not _about(e, path):
            raise
        raise error_for(e, path, what) from None
    except _op_error_types() as e:  # TensorFlow's writers: said only if about `path`
        message = getattr(e, "message", "")
        if str(path) not in message and not is_temporary_of(message, path):
            raise
        raise error_for(e, path, what) from None


def _nearest_existing(directory: str) -> str:
    while not fs.exists(directory) and os.path.dirname(directory) != directory:
        directory = os.path.dirname(directory)
    return directory


def check_writable(what: str, path: str, is_dir: bool = False) -> None:
    """Refuses, before any work, an output the run could not write: the directory it goes in
    (or the nearest existing one above it, where the run would create the rest) is read-only,
    not writable by this user, or a file. Local paths only (a store says so only on writing);
    nothing is created or left behind."""
    if not path or fs.is_url(path):
        return
    from util import io_utils  # io_utils writes through naming(): imported here, not above
    directory = fs.abspath(path) if is_dir else os.path.dirname(fs.abspath(path))
    existing = _nearest_existing(directory)
    if not fs.isdir(existing):
        raise OutputWriteError(errno.ENOTDIR, "Not a directory", path, what,
                               f"{existing} is a file, where a directory should be")
    probe = os.path.join(existing, f".write_test.{os.getpid()}.{uuid.uuid4().hex[:8]}")
    try:
        with io_utils.atomic_open(probe):
            pass  # created, renamed and deleted: what every output here goes through
        fs.remove(probe)
    except OSError as e:
        code, words = reason(e, probe)
        raise OutputWriteError(code, words, path, what, f"directory {existing}") from None
