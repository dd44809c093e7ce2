"""Reading GLUE-style TSV files: tab-separated, literal quote characters, optional header.

GLUE files are not CSV: MRPC and others contain unbalanced `"` characters that a quoting reader
would merge across lines, so a row is exactly one line split on tabs (as the official release's
csv reader with quotechar=None). Some files start with a UTF-8 byte-order mark (MRPC), which is
dropped. A `Layout` says which columns hold what for one kind of split.
"""
import dataclasses
from typing import Iterator

from finetune import task as task_lib
from util import fs

TAB = "\t"


@dataclasses.dataclass(frozen=True)
class Layout:
    """Column positions (negative counts from the end, as for STS-B) of one split's TSV file."""
    header: bool
    text_a: int
    text_b: int | None = None
    label: int | None = None  # None for unlabeled (test) files
    index: int | None = None  # the id column GLUE submissions are keyed by (test files)

    def min_columns(self) -> int:
        cols = [c for c in (self.text_a, self.text_b, self.label, self.index) if c is not None]
        return max(c + 1 if c >= 0 else -c for c in cols)

    def describe(self) -> str:
        parts = [f"text_a={self.text_a}"]
        if self.text_b is not None:
            parts.append(f"text_b={self.text_b}")
        if self.label is not None:
            parts.append(f"label={self.label}")
        if self.index is not None:
            parts.append(f"index={self.index}")
        return ", ".join(parts)


@dataclasses.dataclass(frozen=True)
class Row:
    """One parsed TSV data row. `line` is 1-based in the file; `source` is "path:line"."""
    line: int
    number: int  # 0-based position among data rows (header excluded)
    text_a: str
    text_b: str | None
    label: str | None
    index: str | None
    source: str


def iter_tsv_lines(path: str) -> Iterator[tuple[int, list[str]]]:
    """(1-based line number, fields) for every non-empty line of a TSV file."""
    with fs.open(path, encoding="utf-8-sig", newline="") as f:
        try:
            for line_no, line in enumerate(f, start=1):
                line = line.rstrip("\r\n")
                if not line.strip():
                    continue
                yield line_no, line.split("\t")
        except UnicodeDecodeError as e:
            raise task_lib.not_utf8_error(path, e) from None


def read_rows(path: str, layout: Layout, max_rows: int | None = None) -> list[Row]:
    """The data rows of `path` under `layout` (first `max_rows` only, when given).

    Raises:
      TaskDataError: a row with too few columns (naming file, line and expected layout).
    """
    needed = layout.min_columns()
    rows: list[Row] = []
    first = True
    for line_no, fields in iter_tsv_lines(path):
        if first and layout.header:
            first = False
            continue
        first = False
        if max_rows is not None and len(rows) >= max_rows:
            break
        if len(fields) < needed:
            raise task_lib.TaskDataError(
                f"{path}:{line_no}: expected at least {needed} tab-separated columns "
                f"({layout.describe()}), found {len(fields)}: {TAB.join(fields)[:200]!r}")

        def col(i):
            return None if i is None else fields[i].strip()

        rows.append(Row(line=line_no, number=len(rows), text_a=col(layout.text_a),
                        text_b=col(layout.text_b), label=col(layout.label),
                        index=col(layout.index), source=f"{path}:{line_no}"))
    return rows
