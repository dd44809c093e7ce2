"""Every file a command reads or writes goes through here: local paths or URLs (gs://, s3://,
hdfs://, file://, ram://).

A local path (no `scheme://`) is served by Python's os and open exactly as before (same speed,
fsync, atomic rename, exclusive create). A URL goes through TensorFlow's file layer,
tf.io.gfile, the one TensorFlow's checkpoint, TFRecord and summary readers and writers use.

What a write promises depends on the storage (util/io_utils.atomic_open says it per write):
local disk and HDFS rename atomically; object stores (GCS, S3) have no rename, and gfile's rename
copies then deletes, but each object appears whole or not at all.

A `file://` URL is the local disk: replace() renames it as a local path (atomic), and
io_utils.atomic_open and the run lock treat it so. Whether two paths are one place (any spelling:
local, file://, symlinks, `..`, extra slashes) is decided by relation() / same_place(), which every
check protecting an input from an output uses; check_spelling() refuses the URLs TensorFlow would
read otherwise than meant (`file://relative/path`, `FILE://`).

Only os.path's pure string functions (join, dirname, basename, split, splitext, isabs,
expanduser) are safe on URLs; anything that touches the disk or the working directory must come
from here (tests/test_fs_rule.py checks it).
"""
import ctypes
import errno
import io
import os
import posixpath
import shutil
import stat
import sys
from typing import IO, Any, Iterator


class _LazyTensorFlow:
    """TensorFlow imported on first use of a URL: local paths do not pay its start-up."""

    def __getattr__(self, name: str) -> Any:
        import tensorflow
        return getattr(tensorflow, name)


class _LazyGFile:
    def __getattr__(self, name: str) -> Any:
        import tensorflow
        return getattr(tensorflow.io.gfile, name)


tf = _LazyTensorFlow()
_gfile = _LazyGFile()


def is_url(path: str) -> bool:
    """True for `scheme://...` paths, which only TensorFlow's file layer can reach."""
    return "://" in str(path)


def _is_root(path: str) -> bool:
    """gs://bucket, ram://: nothing above it to list."""
    rest = path.split("://", 1)[1].strip("/")
    return "/" not in rest


def _listed_in_parent(path: str) -> bool:
    # TensorFlow's in-memory filesystem (ram://) answers isdir/exists for any string prefix of a
    # file name (ram://d/ck "is a directory" when ram://d/ck.index exists); a real bucket
    # lists its subdirectories by name. Asking the parent serves both the same way.
    path = path.rstrip("/")
    if _is_root(path):
        return True
    try:
        names = _gfile.listdir(posixpath.dirname(path))
    except tf.errors.OpError:
        return False
    return posixpath.basename(path) in {n.rstrip("/") for n in names}


def isdir(path: str) -> bool:
    if not is_url(path):
        return os.path.isdir(path)
    if not _gfile.isdir(path):
        return False
    try:
        return _listed_in_parent(path) or bool(_gfile.glob(path.rstrip("/") + "/*"))
    except tf.errors.OpError:
        return False


def isfile(path: str) -> bool:
    if not is_url(path):
        return os.path.isfile(path)
    try:
        return not _gfile.stat(path).is_directory
    except tf.errors.OpError:
        return False


def exists(path: str) -> bool:
    if not is_url(path):
        return os.path.exists(path)
    return isfile(path) or isdir(path)


def not_a_file(path: str) -> str:
    """Why `path` cannot be read as a file, in words for a message: "does not exist", "is a
    directory", or what special file it is (/dev/null is empty; a named pipe such as bash's
    <(...) can be read only once); "" for a regular file (or an object of a store)."""
    if isfile(path):
        return ""
    if not exists(path):
        return "does not exist"
    if isdir(path):
        return "is a directory, not a file"
    if os.path.samefile(path, os.devnull):
        return "is empty (the null device)"
    mode = os.stat(path).st_mode
    kind = "a named pipe" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode) \
        else "a device"
    return f"is {kind}, not a regular file; copy what it holds to a file and give that"


def getsize(path: str) -> int:
    if not is_url(path):
        return os.path.getsize(path)
    return _stat(path).length


def version(path: str) -> tuple | None:
    """(path, inode, size, mtime in ns) of a local file: changes whenever its content may have;
    None for a URL (stores such as ram:// keep no modification time)."""
    if is_url(path):
        return None
    st = os.stat(path)
    return os.path.abspath(path), st.st_ino, st.st_size, st.st_mtime_ns


def getmtime(path: str) -> float:
    """Seconds since the epoch; 0.0 where the store keeps no times (ram://)."""
    if not is_url(path):
        return os.path.getmtime(path)
    return _stat(path).mtime_nsec / 1e9


def _stat(path: str):
    try:
        return _gfile.stat(path)
    except tf.errors.NotFoundError:
        raise FileNotFoundError(f"No such file: {path}") from None


def listdir(path: str) -> list[str]:
    """Names (not paths) in a directory."""
    if not is_url(path):
        return os.listdir(path)
    try:
        return [n.rstrip("/") for n in _gfile.listdir(path)]
    except tf.errors.NotFoundError:
        raise FileNotFoundError(f"No such directory: {path}") from None


def glob(pattern: str) -> list[str]:
    """Paths matching a shell pattern (*, ?, [...]) in their last components."""
    if not is_url(pattern):
        import glob as glob_lib
        return glob_lib.glob(pattern)
    try:
        return _gfile.glob(pattern)
    except tf.errors.NotFoundError:
        return []


def escape(path: str) -> str:
    """`path` with glob's special characters made literal (both layers read [x] as x)."""
    import glob as glob_lib
    return glob_lib.escape(path)


def walk(top: str) -> Iterator[tuple[str, list[str], list[str]]]:
    """os.walk (following symlinks) for local paths; gfile's walk for URLs."""
    if not is_url(top):
        yield from os.walk(top, followlinks=True)
        return
    for root, dirs, files in _gfile.walk(top):
        dirs[:] = [d.rstrip("/") for d in dirs]
        yield root, dirs, files


def makedirs(path: str) -> None:
    local = local_path(path)  # file:// too: TensorFlow would make it 0755 whatever the umask
    if local is not None:
        os.makedirs(local, exist_ok=True)
        return
    try:
        _gfile.makedirs(path)
    except tf.errors.OpError as e:
        raise OSError(f"cannot create directory {path}: {e.message}") from None


def remove(path: str) -> None:
    """Deletes a file; FileNotFoundError if there is none."""
    if not is_url(path):
        os.remove(path)
        return
    try:
        _gfile.remove(path)
    except tf.errors.NotFoundError:
        raise FileNotFoundError(f"No such file: {path}") from None


def remove_if_empty(path: str) -> None:
    """Deletes a local directory if it holds nothing (a URL: left as it is; object stores keep
    no empty directories)."""
    if not is_url(path) and os.path.isdir(path) and not os.listdir(path):
        try:
            os.rmdir(path)
        except OSError:
            pass  # filled meanwhile, or not ours to delete: it stays


def rmtree(path: str) -> None:
    """Deletes a directory tree, ignoring what is already gone."""
    if not is_url(path):
        shutil.rmtree(path, ignore_errors=True)
        return
    try:
        _gfile.rmtree(path)
    except tf.errors.NotFoundError:
        pass


def replace(src: str, dst: str) -> None:
    """Renames `src` over `dst`: atomic on local disk (local paths and file:// URLs) and HDFS; a
    copy then a delete on object stores (the copy appears whole or not at all)."""
    local_src, local_dst = local_path(src), local_path(dst)
    if local_src is not None and local_dst is not None:  # file:// URLs too: one rename
        os.replace(local_src, local_dst)
        return
    try:
        _gfile.rename(src, dst, overwrite=True)
    except tf.errors.OpError as e:
        raise OSError(f"cannot rename {src} to {dst}: {e.message}") from None


_RENAME_EXCHANGE = 2  # linux/fs.h
_AT_FDCWD = -100
# errnos saying "no atomic exchange here" (old kernel, filesystem without it, not Linux).
_NO_EXCHANGE = {errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.ENOTSUP}


def exchange(a: str, b: str) -> bool:
    """Swaps two existing local paths in one atomic step (Linux renameat2 RENAME_EXCHANGE):
    afterwards each names what the other did, and at no instant is either missing. Returns
    False where the system or the filesystem has no such call (the caller falls back); other
    failures raise OSError naming both paths."""
    renameat2 = _libc_renameat2()
    if renameat2 is None:
        return False
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in _NO_EXCHANGE:
        return False
    raise OSError(err, f"cannot exchange {a} and {b}: {os.strerror(err)}")


def _libc_renameat2():
    """glibc's renameat2 (2.28+), else None (another libc, another system)."""
    if not sys.platform.startswith("linux"):
        return None
    function = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)
    if function is not None:
        function.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                             ctypes.c_uint]
        function.restype = ctypes.c_int
    return function


def copy(src: str, dst: str) -> None:
    """Copies a file's bytes (not atomic: see io_utils.copy_file for that)."""
    if not is_url(src) and not is_url(dst):
        shutil.copyfile(src, dst)
        return
    _gfile.copy(src, dst, overwrite=True)


def abspath(path: str) -> str:
    """Absolute local path; a URL is already absolute and is returned unchanged."""
    return path if is_url(path) else os.path.abspath(path)


def resolve_relative(base: str, path: str) -> str:
    """`path` (~ expanded) taken relative to directory `base` (absolute, or a URL) unless it is
    absolute or a URL itself."""
    path = os.path.expanduser(path)
    if is_url(path) or os.path.isabs(path):
        return path
    return os.path.join(base, path)


def realpath(path: str) -> str:
    """Local path with symlinks resolved; a URL unchanged (object stores have no links)."""
    return path if is_url(path) else os.path.realpath(path)


def relpath(path: str, start: str) -> str:
    """`path` relative to directory `start` (a URL: the part after `start/`)."""
    if not is_url(path):
        return os.path.relpath(path, start)
    start = start.rstrip("/") + "/"
    return path[len(start):] if path.startswith(start) else path


def broken_link_target(path: str) -> str | None:
    """Where `path` points if it is a symbolic link to nothing (object stores have no links)."""
    if is_url(path) or not os.path.islink(path) or os.path.exists(path):
        return None
    return os.readlink(path)


# -- where a path points: one place, however it is spelled -----------------------------------


def _scheme(path: str) -> str:
    return str(path).split("://", 1)[0].lower() if is_url(path) else ""


def local_path(path: str) -> str | None:
    """The local path a local path or `file://` URL names (None for other URLs): `file:///x`,
    `file:////x//` and `FILE:///x` are /x. Like TensorFlow, anything between `file://` and the
    next slash is taken for a host name and ignored (check_spelling refuses such URLs)."""
    if not is_url(path):
        return path
    if _scheme(path) != "file":
        return None
    rest = path.split("://", 1)[1]
    return "/" + rest.split("/", 1)[1].lstrip("/") if "/" in rest else "/"


def place(path: str) -> str:
    """A canonical spelling of where `path` points, for telling places apart.

    Local paths and `file://` URLs: absolute, symlinks and `.`/`..` resolved, no trailing or
    repeated slashes. Other URLs: scheme in lower case, repeated slashes collapsed, `.`/`..`
    resolved, no trailing slash. The second errs towards "the same place" (`gs://b/a//c` and
    `gs://b/a/c` are two objects to GCS but one here), which is the safe side for the checks
    that use it: they protect what a command reads from what it writes.
    """
    local = local_path(path)
    if local is not None:
        return os.path.realpath(local)
    rest = "/" + path.split("://", 1)[1].lstrip("/")
    return f"{_scheme(path)}://" + posixpath.normpath(rest).lstrip("/")


def relation(a: str, b: str) -> str | None:
    """How place `a` stands to place `b`: "same", "inside" (a lies inside b), "contains" (b lies
    inside a), or None (apart). Any spelling of either (see place); an existing local file
    reached through a hard link or another mount is also the same."""
    pa, pb = place(a), place(b)
    if pa == pb:
        return "same"
    la, lb = local_path(a), local_path(b)
    if la is not None and lb is not None and os.path.exists(la) and os.path.exists(lb) \
            and os.path.samefile(la, lb):
        return "same"
    if pa.startswith(pb.rstrip("/") + "/"):
        return "inside"
    if pb.startswith(pa.rstrip("/") + "/"):
        return "contains"
    return None


def same_place(a: str, b: str) -> bool:
    """Whether `a` and `b` name one file or directory, however each is spelled (see place)."""
    return relation(a, b) == "same"


def check_spelling(path: str, what: str) -> None:
    """Refuses (ValueError naming `what` and the path) a URL TensorFlow would read otherwise
    than the user meant: `file://` followed by a relative path (`file://data/x` names host
    `data` and path /x: TensorFlow reads and writes /x at the filesystem root), and a scheme
    not in lower case (TensorFlow knows only `file`, `gs`...). Local paths pass as they are."""
    if not isinstance(path, str) or not is_url(path):
        return
    scheme, rest = path.split("://", 1)
    if scheme != scheme.lower():
        raise ValueError(f"{what} {path}: write the scheme in lower case "
                         f"({scheme.lower()}://{rest}); TensorFlow does not know {scheme}://")
    if scheme != "file":
        return
    host = rest.split("/", 1)[0]
    if host and host != "localhost":
        meant = "file://" + os.path.abspath(rest)
        raise ValueError(
            f"{what} {path}: a file:// URL needs an absolute path (three slashes): TensorFlow "
            f"takes {host!r} for a host name and would use {local_path(path)} at the top of "
            f"the filesystem. Did you mean {meant} (or the local path {rest})?")


def check_spellings(paths: dict[str, Any]) -> None:
    """check_spelling for each (what -> path or None) of a command's arguments."""
    for what, path in paths.items():
        if path is not None:
            check_spelling(path, what)


def same_content(a: str, b: str) -> bool:
    """Whether two files hold the same bytes."""
    if not is_url(a) and not is_url(b):
        import filecmp
        return filecmp.cmp(a, b, shallow=False)
    return getsize(a) == getsize(b) and read_bytes(a) == read_bytes(b)


def read_bytes(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def open_maybe_gzip(path: str, mode: str = "r", encoding: str | None = "utf-8",
                    newline: str | None = None) -> IO[Any]:
    """open() for reading, decompressing a file whose name ends in .gz."""
    if not path.endswith(".gz"):
        return open(path, mode, encoding=encoding, newline=newline)
    import gzip
    raw = open(path, "rb")
    stream = gzip.GzipFile(fileobj=raw, mode="rb")
    stream.myfileobj = raw  # closed with the GzipFile, as when gzip opens the file itself
    if "b" in mode:
        return stream
    return io.TextIOWrapper(stream, encoding=encoding, newline=newline)


class _GFileRaw(io.RawIOBase):
    """A gfile stream as a raw binary file, so io.BufferedReader can put its fast readline and
    iteration on top (GFile's own readline is a TensorFlow call per line)."""

    def __init__(self, gfile: Any):
        self._f = gfile

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        data = self._f.read(len(buffer))
        buffer[:len(data)] = data
        return len(data)

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = 0) -> int:
        if whence == io.SEEK_END:
            offset, whence = self._f.size() + offset, io.SEEK_SET
        self._f.seek(offset, whence)
        return self._f.tell()

    def tell(self) -> int:
        return self._f.tell()

    def close(self) -> None:
        if not self.closed:
            self._f.close()
        super().close()


def open(path: str, mode: str = "r", encoding: str | None = "utf-8",  # noqa: A001
         newline: str | None = None) -> IO[Any]:
    """Opens a file as the builtin open does ("r", "rb", "w", "wb", "a"...).

    A URL opened for reading streams through a buffered reader; text modes decode with
    `encoding` and translate newlines as open does. A URL opened for writing streams to the
    store (an object appears when the file is closed; io_utils.atomic_open for files that must
    never be seen half-written).
    """
    binary = "b" in mode
    if not is_url(path):
        import builtins
        if binary:
            return builtins.open(path, mode)
        return builtins.open(path, mode, encoding=encoding, newline=newline)
    if "r" in mode and "+" not in mode:
        try:
            raw = _GFileRaw(_gfile.GFile(path, "rb"))
            raw._f.size()  # noqa: SLF001 -- raises NotFoundError now rather than on first read
        except tf.errors.NotFoundError:
            raise FileNotFoundError(f"No such file: {path}") from None
        stream = io.BufferedReader(raw, buffer_size=1 << 20)
        return stream if binary else io.TextIOWrapper(stream, encoding=encoding, newline=newline)
    gfile_mode = mode.replace("t", "").replace("b", "") + "b"
    # The parent is made first, as on a local disk: a bucket lists a directory from its
    # objects' names, but ram:// (and HDFS) only directories made as such.
    makedirs(posixpath.dirname(path))
    try:
        stream = io.BufferedWriter(_GFileWriterRaw(_gfile.GFile(path, gfile_mode)), 1 << 20)
    except tf.errors.OpError as e:
        raise OSError(f"cannot open {path} for writing: {e.message}") from None
    return stream if binary else io.TextIOWrapper(stream, encoding=encoding, newline=newline)


class _GFileWriterRaw(io.RawIOBase):
    """A gfile stream as a raw binary file for io.BufferedWriter. flush() hands bytes to
    TensorFlow without asking the store to persist them: on some stores (GCS) a gfile flush
    uploads the whole object so far; close() writes it once."""

    def __init__(self, gfile: Any):
        self._f = gfile

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        self._f.write(bytes(data))
        return len(data)

    def close(self) -> None:
        if not self.closed:
            try:
                self._f.close()
            except tf.errors.OpError as e:
                raise OSError(f"cannot write {self._f.name}: {e.message}") from None
            finally:
                super().close()
