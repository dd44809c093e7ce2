"""Reading the rows of a user's TSV, CSV or JSONL file by field name (or column number).

TSV: one row per line, split on tabs, no quoting (GLUE's convention and reader, glue_data.py).
CSV: the csv module's dialect (quoted fields may hold commas, quotes and newlines).
JSONL: one JSON object per line; a number or boolean field is read as its JSON text.
With a header (TSV/CSV, the default) fields are named by the header line; without one they are
0-based column numbers. Every error names the file and line, and the field where it applies.
"""
import csv
import dataclasses
import json
from typing import Iterator

from finetune import task as task_lib
from finetune.classification import glue_data
from util import fs


@dataclasses.dataclass(frozen=True)
class Record:
    """One data row: `values` maps a role ("text_a", "label", ...) to the field's text."""
    line: int  # 1-based line of the row's start in the file
    number: int  # 0-based position among the data rows
    values: dict
    source: str  # "path:line"


def _csv_rows(path: str) -> Iterator[tuple[int, list[str]]]:
    with fs.open_maybe_gzip(path, encoding="utf-8-sig", newline="") as f:
        reader = csv.reader(f)
        start = 1
        for fields in reader:
            if any(field.strip() for field in fields):
                yield start, fields
            start = reader.line_num + 1


def _json_value(value, path: str, line_no: int, key: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, (bool, int, float)):
        return json.dumps(value)
    raise task_lib.TaskDataError(f"{path}:{line_no}: field {key!r} holds "
                                 f"{type(value).__name__} {value!r}, expected text or a number")


def _read_jsonl(path: str, fields: dict, max_rows: int | None) -> list[Record]:
    records: list[Record] = []
    with fs.open_maybe_gzip(path, encoding="utf-8-sig") as f:
        for line_no, line in enumerate(f, start=1):
            if not line.strip():
                continue
            if max_rows is not None and len(records) >= max_rows:
                break
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise task_lib.TaskDataError(
                    f"{path}:{line_no}: not a JSON object ({e.msg} at column {e.colno}): "
                    f"{line.strip()[:200]!r}") from None
            if not isinstance(obj, dict):
                raise task_lib.TaskDataError(f"{path}:{line_no}: expected a JSON object, got "
                                             f"{type(obj).__name__}")
            values = {}
            for role, key in fields.items():
                if key not in obj:
                    raise task_lib.TaskDataError(
                        f"{path}:{line_no}: no field {key!r} ({role}); the object has: "
                        f"{', '.join(map(repr, obj)) or 'nothing'}")
                values[role] = _json_value(obj[key], path, line_no, key)
            records.append(Record(line_no, len(records), values, f"{path}:{line_no}"))
    return records


def _read_table(path: str, fmt: str, fields: dict, header: bool,
                max_rows: int | None) -> list[Record]:
    records: list[Record] = []
    # TSV rows are GLUE's (one line, split on tabs): read by the GLUE reader.
    rows = glue_data.iter_tsv_lines(path) if fmt == "tsv" else _csv_rows(path)
    columns = dict(fields)  # role -> column number
    if header:
        try:
            header_line, names = next(rows)
        except StopIteration:
            return []
        names = [n.strip() for n in names]
        for role, key in fields.items():
            if key not in names:
                raise task_lib.TaskDataError(
                    f"{path}:{header_line}: the header has no column {key!r} ({role}); its "
                    f"columns: {', '.join(map(repr, names))}")
            columns[role] = names.index(key)
    needed = max(c + 1 if c >= 0 else -c for c in columns.values())
    for line_no, row in rows:
        if max_rows is not None and len(records) >= max_rows:
            break
        if len(row) < needed:
            missing = [fields[r] for r, c in columns.items()
                       if (c if c >= 0 else -c - 1) >= len(row)]
            separator = "\t" if fmt == "tsv" else ","
            raise task_lib.TaskDataError(
                f"{path}:{line_no}: {len(row)} column(s), too few for field "
                f"{missing[0]!r}: {separator.join(row)[:200]!r}")
        values = {role: row[c].strip() for role, c in columns.items()}
        records.append(Record(line_no, len(records), values, f"{path}:{line_no}"))
    return records


def read_records(path: str, fmt: str, fields: dict, header: bool = True,
                 max_rows: int | None = None) -> list[Record]:
    """The data rows of `path`, each with the values of `fields` (role -> field name/number).

    Raises:
      TaskDataError: an unreadable row, a missing field or column (file, line, field named).
    """
    try:
        if fmt == "jsonl":
            return _read_jsonl(path, fields, max_rows)
        return _read_table(path, fmt, fields, header, max_rows)
    except UnicodeDecodeError as e:
        raise task_lib.not_utf8_error(path, e) from None
    except csv.Error as e:
        raise task_lib.TaskDataError(f"{path}: not readable as CSV: {e}") from None
