"""Reading a raw-text corpus: discovery, compression, tar archives, strict UTF-8 with offsets.

A corpus is a directory tree. Every regular, non-hidden file in it is input:
  - plain UTF-8 text: one sentence or paragraph per line; by default blank lines separate
    documents (the layout of the official release and of ../shared/data/pretrain_corpus);
  - the same text compressed with gzip, bzip2 or xz (recognised by magic bytes, not by name);
  - tar archives, plain or compressed, whose members are documents: the OpenWebText layout of
    the official build_openwebtext_pretraining_dataset.py (a directory of `*_data.xz` files,
    each an xz-compressed tar of one-document .txt files; the outer openwebtext.tar works too).
    Archive members may themselves be compressed text or archives.

Plain files can be read in byte ranges, so one large file can feed several shards; ranges are
cut after a blank line (or after a line) so no line is split. Everything else is read whole.

Text must be UTF-8; the first invalid byte raises CorpusError naming the file (and archive
member) and its byte offset, so the user can find and fix it.
"""
import bz2
import contextlib
import dataclasses
import gzip
import logging
import lzma
import os
import re
import tarfile
import zlib
from typing import BinaryIO, Callable, Iterator

from util import fs

log = logging.getLogger(__name__)

# Lines stream through in blocks of this many bytes (always cut at a newline).
BLOCK_BYTES = 1 << 22
# How far past a cut point to look for a blank line before settling for a line boundary.
BLANK_LINE_SEARCH_BYTES = 1 << 22

_XZ_MAGIC = b"\xfd7zXZ\x00"
_GZIP_MAGIC = b"\x1f\x8b"
_BZ2_MAGIC = re.compile(rb"BZh[1-9]1AY&SY")
_UNSUPPORTED_MAGIC = {b"PK\x03\x04": "zip", b"\x28\xb5\x2f\xfd": "zstd", b"7z\xbc\xaf": "7z"}
# A blank (whitespace-only) line; the official script strips each line, so "  \r" is blank too.
_BLANK_LINE = re.compile(rb"\n[ \t\r\f\v]*\n")

_READ_ERRORS = (OSError, EOFError, lzma.LZMAError, zlib.error, tarfile.TarError)
# Rough expansion of compressed files, only used to balance the work between shards.
_EXPANSION = {"text": 1.0, "gzip": 3.0, "bz2": 4.0, "xz": 4.0}


class CorpusError(ValueError):
    """Unreadable input: missing directory, no files, a file that is not UTF-8, ..."""


@dataclasses.dataclass(frozen=True)
class InputFile:
    """One file of the corpus.

    path: absolute path; relpath: path relative to the corpus dir (used in messages/metadata);
    size: bytes on disk; compression: "text" (none), "gzip", "bz2" or "xz"; is_tar: the
    (decompressed) content is a tar archive; problem: why the file cannot be read, if known
    from its first bytes (reading it raises CorpusError; --skip-bad-files skips it).
    """
    path: str
    relpath: str
    size: int
    compression: str
    is_tar: bool
    problem: str | None = None

    @property
    def weight(self) -> float:
        """Estimated bytes of text, for balancing work."""
        return self.size * _EXPANSION[self.compression]

    @property
    def splittable(self) -> bool:
        return self.compression == "text" and not self.is_tar and self.problem is None


@dataclasses.dataclass(frozen=True)
class Unit:
    """A piece of work: bytes [start, end) of a plain file, or a whole compressed/tar file."""
    file: InputFile
    start: int
    end: int

    @property
    def weight(self) -> float:
        return (self.end - self.start) * _EXPANSION[self.file.compression]

    def describe(self) -> str:
        if self.file.splittable and (self.start, self.end) != (0, self.file.size):
            return f"{self.file.relpath} [bytes {self.start}-{self.end}]"
        return self.file.relpath


# ---------------------------------------------------------------------------------------------
# Discovery.

@contextlib.contextmanager
def _open_decompressed(path: str, compression: str) -> Iterator[BinaryIO]:
    with fs.open(path, "rb") as raw:
        if compression == "text":
            yield raw
            return
        with _decompressor(compression, raw) as f:
            yield f


def _sniff_compression(head: bytes) -> str:
    if head.startswith(_XZ_MAGIC):
        return "xz"
    if head.startswith(_GZIP_MAGIC):
        return "gzip"
    if _BZ2_MAGIC.match(head):
        return "bz2"
    return "text"


def _looks_like_tar(block: bytes) -> bool:
    # POSIX/GNU tar headers carry "ustar" at offset 257.
    return len(block) >= 262 and block[257:262] == b"ustar"


def describe_file(path: str, relpath: str) -> InputFile:
    """Classifies one file by its first bytes (and, when compressed, its first decompressed bytes)."""
    with fs.open(path, "rb") as f:
        head = f.read(512)
    size = fs.getsize(path)
    for magic, name in _UNSUPPORTED_MAGIC.items():
        if head.startswith(magic):
            return InputFile(path, relpath, size, "text", False, problem=(
                f"{relpath} is a {name} archive, which is not supported; unpack it, or "
                f"recompress it with gzip, bzip2 or xz"))
    compression = _sniff_compression(head)
    if compression == "text":
        return InputFile(path, relpath, size, compression, _looks_like_tar(head))
    try:
        with _open_decompressed(path, compression) as f:
            is_tar = _looks_like_tar(f.read(512))
    except _READ_ERRORS as e:
        return InputFile(path, relpath, size, compression, False,
                         problem=f"{relpath}: cannot read or decompress ({compression}): {e}")
    return InputFile(path, relpath, size, compression, is_tar)


def find_input_files(corpus_dir: str) -> list[InputFile]:
    """All regular, non-hidden files under `corpus_dir`, sorted by relative path.

    Raises:
      CorpusError: the directory does not exist, is not a directory, or holds no input files.
    """
    if not fs.exists(corpus_dir):
        raise CorpusError(f"--corpus-dir {corpus_dir} does not exist")
    if not fs.isdir(corpus_dir):
        raise CorpusError(f"--corpus-dir {corpus_dir} is not a directory")
    files = []
    seen_dirs = set()
    # Symlinked sub-directories are corpus too (they used to be skipped without a word); a
    # directory reached twice (a link loop, two links to one place) is read once.
    for root, dirs, names in fs.walk(corpus_dir):
        real = fs.place(root)
        if real in seen_dirs:
            log.warning("--corpus-dir: %s is %s, already read; skipped", root, real)
            dirs[:] = []
            continue
        seen_dirs.add(real)
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(names):
            path = os.path.join(root, name)
            relpath = fs.relpath(path, corpus_dir)
            if name.startswith("."):
                continue
            target = fs.broken_link_target(path)
            if target is not None:
                raise CorpusError(f"--corpus-dir: {relpath} is a broken symbolic link (to "
                                  f"{target}); fix or remove it")
            if not fs.isfile(path):
                continue
            files.append(describe_file(fs.abspath(path), relpath))
    files.sort(key=lambda f: f.relpath)
    if not files:
        raise CorpusError(f"--corpus-dir {corpus_dir} holds no input files (hidden files are ignored); "
                          f"expected .txt files, gzip/bzip2/xz-compressed text or tar archives")
    if all(f.size == 0 for f in files):
        raise CorpusError(f"--corpus-dir {corpus_dir}: all {len(files)} input files are empty")
    return files


def split_into_units(files: list[InputFile], chunk_bytes: int,
                     blanks_separate_docs: bool) -> list[Unit]:
    """Cuts plain files larger than 1.5 * chunk_bytes into ranges; other files stay whole."""
    units = []
    for file in files:
        if not file.splittable or file.size <= 1.5 * chunk_bytes:
            units.append(Unit(file, 0, file.size))
            continue
        pieces = max(2, round(file.size / chunk_bytes))
        cuts = [0]
        with fs.open(file.path, "rb") as f:
            for k in range(1, pieces):
                cut = _next_boundary(f, file.size * k // pieces, file.size, blanks_separate_docs)
                if cut > cuts[-1] and cut < file.size:
                    cuts.append(cut)
        cuts.append(file.size)
        units.extend(Unit(file, a, b) for a, b in zip(cuts, cuts[1:]))
    return units


def _next_boundary(f: BinaryIO, position: int, size: int, blank_lines: bool) -> int:
    """Offset just after the first blank line (or, failing that / if not wanted, newline) at or
    after `position`; `size` if there is none."""
    f.seek(max(0, position - 1))  # include the preceding byte so a "\n" right at position counts
    window = f.read(BLANK_LINE_SEARCH_BYTES if blank_lines else 1 << 16)
    base = max(0, position - 1)
    if blank_lines:
        match = _BLANK_LINE.search(window)
        if match:
            return base + match.end()
    newline = window.find(b"\n")
    while newline < 0 and window:
        base += len(window)
        window = f.read(1 << 16)
        newline = window.find(b"\n")
    return min(size, base + newline + 1) if newline >= 0 else size


# ---------------------------------------------------------------------------------------------
# Reading. Documents are yielded as iterators of lines; the caller decides what blank lines mean.

@dataclasses.dataclass
class Document:
    """A source of lines. `blank_lines_split` is False for archive members (one document each)."""
    name: str
    lines: Iterator[str]
    blank_lines_split: bool


class _CountingReader:
    """Read-only file wrapper that reports how many bytes were read (progress on disk bytes)."""

    def __init__(self, f: BinaryIO, on_bytes: Callable[[int], None] | None):
        self._f = f
        self._on_bytes = on_bytes

    def read(self, size: int = -1) -> bytes:
        data = self._f.read(size)
        if data and self._on_bytes is not None:
            self._on_bytes(len(data))
        return data

    def readable(self) -> bool:
        return True

    def close(self) -> None:
        self._f.close()


class _Prefixed:
    """A stream whose first bytes were already read (to sniff them) and are served again."""

    def __init__(self, head: bytes, stream):
        self._head = head
        self._stream = stream

    def read(self, size: int = -1) -> bytes:
        if self._head:
            if size is None or size < 0:
                data, self._head = self._head + self._stream.read(), b""
                return data
            data, self._head = self._head[:size], self._head[size:]
            if len(data) < size:
                data += self._stream.read(size - len(data))
            return data
        return self._stream.read(size)

    def readable(self) -> bool:
        return True


class _SizedReader:
    """An archive member's data; running out before `size` bytes means a truncated archive."""

    def __init__(self, stream, size: int, name: str):
        self._stream = stream
        self._remaining = size
        self._name = name

    def read(self, size: int = -1) -> bytes:
        data = self._stream.read(size)
        self._remaining -= len(data)
        if not data and self._remaining > 0 and size != 0:
            raise CorpusError(f"{self._name}: the archive ends {self._remaining} bytes before the "
                              f"end of this member (truncated download?)")
        return data

    def readable(self) -> bool:
        return True


def _read_head(stream, size: int = 512) -> bytes:
    head = b""
    while len(head) < size:
        chunk = stream.read(size - len(head))
        if not chunk:
            break
        head += chunk
    return head


def _decode_lines(stream, name: str, base: int = 0, limit: int | None = None,
                  on_bytes: Callable[[int], None] | None = None) -> Iterator[str]:
    """Strictly decoded lines of `stream` (at most `limit` bytes), without the trailing "\n".

    `base` is the offset of the first byte, for error messages. Blocks are cut at newlines,
    which never fall inside a multi-byte UTF-8 sequence.
    """
    pending = b""
    remaining = limit
    while True:
        size = BLOCK_BYTES if remaining is None else min(BLOCK_BYTES, remaining)
        try:
            block = stream.read(size) if size > 0 else b""
        except _READ_ERRORS as e:
            raise CorpusError(f"{name}: cannot read or decompress: {e}") from None
        if remaining is not None:
            remaining -= len(block)
        if on_bytes is not None and block:
            on_bytes(len(block))
        if not block:
            data, pending = pending, b""
        else:
            data = pending + block
            cut = data.rfind(b"\n") + 1
            if cut == 0:
                pending = data
                continue
            data, pending = data[:cut], data[cut:]
        if data:
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError as e:
                bad = data[e.start:e.start + 4]
                raise CorpusError(
                    f"{name} is not valid UTF-8 at byte offset {base + e.start} "
                    f"(bytes {bad!r}); convert it to UTF-8, remove it, or pass --skip-bad-files"
                ) from None
            if base == 0:  # a Windows editor's byte-order mark is not text
                text = text.removeprefix("\ufeff")
            base += len(data)
            lines = text.split("\n")
            if lines[-1] == "":
                lines.pop()
            yield from lines
        if not block:
            return


def _decompressor(compression: str, stream):
    if compression == "gzip":
        return gzip.GzipFile(fileobj=stream, mode="rb")
    if compression == "bz2":
        return bz2.BZ2File(stream, "rb")
    return lzma.LZMAFile(stream, "rb")


def _stream_documents(stream, name: str, top_level: bool) -> Iterator[Document]:
    """Documents of a byte stream: sniffs compression and tar format, recursing into archives."""
    try:
        head = _read_head(stream)
        compression = _sniff_compression(head)
        where = name
        if compression != "text":
            stream = _decompressor(compression, _Prefixed(head, stream))
            head = _read_head(stream)
            where = f"{name} (decompressed)"
    except _READ_ERRORS as e:
        raise CorpusError(f"{name}: cannot read or decompress: {e}") from None
    stream = _Prefixed(head, stream)
    if _looks_like_tar(head):
        yield from _iter_tar(stream, name)
    else:
        # Top-level files are line streams in which blank lines may separate documents;
        # archive members are one document each (the OpenWebText convention).
        yield Document(name, _decode_lines(stream, where), blank_lines_split=top_level)


def _iter_tar(stream, name: str) -> Iterator[Document]:
    try:
        archive = tarfile.open(fileobj=stream, mode="r|")
        members = iter(archive)
        while True:
            try:
                member = next(members)
            except StopIteration:
                return
            if not member.isfile() or os.path.basename(member.name).startswith("."):
                continue
            member_stream = archive.extractfile(member)
            if member_stream is not None:
                # Consumed fully by the caller before the next member is read (stream mode).
                member_name = f"{name}:{member.name}"
                yield from _stream_documents(_SizedReader(member_stream, member.size, member_name),
                                             member_name, False)
    except _READ_ERRORS as e:
        raise CorpusError(f"{name}: damaged archive: {e}") from None


def iter_documents(unit: Unit, on_bytes: Callable[[int], None] | None = None
                   ) -> Iterator[Document]:
    """The documents of one unit. Plain and compressed text files are a single line stream
    (in which blank lines may separate documents); archive members are one document each.

    on_bytes(n) is called as bytes of the file are read from disk (for progress reporting).
    Each document's lines must be consumed before asking for the next document.
    """
    file = unit.file
    if file.problem is not None:
        raise CorpusError(file.problem + "; fix or remove it, or pass --skip-bad-files")
    if file.splittable:
        with fs.open(file.path, "rb") as f:
            f.seek(unit.start)
            yield Document(file.relpath, _decode_lines(f, file.relpath, unit.start,
                                                       unit.end - unit.start, on_bytes), True)
        return
    with fs.open(file.path, "rb") as f:
        yield from _stream_documents(_CountingReader(f, on_bytes), file.relpath, True)


def validate_utf8(unit: Unit) -> None:
    """Reads the whole unit, raising CorpusError at the first invalid byte (nothing else)."""
    for document in iter_documents(unit):
        for _ in document.lines:
            pass
