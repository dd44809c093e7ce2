"""Hyperparameter objects filled from `--hparams` JSON, with strict key and type checks.

Both configure_pretraining.py and configure_finetuning.py build on `HParams`: fields are declared
as dataclass fields with defaults; `update()` refuses unknown keys (suggesting the closest valid
names) and values of the wrong type (naming key, expected type and value); `check_values()`
refuses numbers that are not finite or outside the `valid` range a field declares (`hp(...,
valid=Range(...) or OneOf(...))`), before anything is derived from them.
"""
import dataclasses
import difflib
import json
import math
import typing
from typing import Any, Mapping, TypeVar

from util import fs, io_utils


class HParamError(ValueError):
    """An hparam that does not exist or has a value of the wrong type."""


def parse_hparams_arg(hparams: str | Mapping[str, Any] | None) -> dict[str, Any]:
    """`--hparams` value: a JSON object string, a path to a .json file, or already a dict."""
    if hparams is None or hparams == "":
        return {}
    if isinstance(hparams, Mapping):
        return dict(hparams)
    text = hparams.strip()
    if text.endswith(".json") and not text.startswith("{"):
        fs.check_spelling(text, "--hparams")
        if not fs.exists(text):
            raise HParamError(f"--hparams: file {text} does not exist")
        value = io_utils.read_json(text)
        where = text
    else:
        try:
            value = json.loads(text)
        except json.JSONDecodeError as e:
            raise HParamError(
                f"--hparams is neither a JSON object nor a path to a .json file: {e.msg} at "
                f"character {e.pos} of {text!r}") from None
        where = "--hparams"
    if not isinstance(value, dict):
        raise HParamError(f"{where}: expected a JSON object of hparams, got {type(value).__name__}")
    return value


_H = TypeVar("_H", bound="HParams")


def _type_ok(value: Any, annotation: Any) -> bool:
    origin = typing.get_origin(annotation)
    if annotation is Any:
        return True
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        return any(_type_ok(value, a) for a in typing.get_args(annotation))
    if annotation is type(None):
        return value is None
    if annotation is float:
        # JSON has one number type: accept ints for float fields, but never bools.
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if origin in (list, tuple):
        args = typing.get_args(annotation)
        return isinstance(value, (list, tuple)) and (
            not args or all(_type_ok(v, args[0]) for v in value))
    if origin is dict:
        return isinstance(value, dict)
    if isinstance(annotation, type):
        return isinstance(value, annotation)
    return True


def _strings(value: Any, where: str = "") -> list[tuple[str, str]]:
    """(where, string) for the strings in a value, also inside lists and dicts: where is the
    key path inside it (".task.train", "[2]")."""
    if isinstance(value, str):
        return [(where, value)]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in _strings(v, f"{where}.{k}")]
    if isinstance(value, (list, tuple)):
        return [s for i, v in enumerate(value) for s in _strings(v, f"{where}[{i}]")]
    return []


def _type_name(annotation: Any) -> str:
    if isinstance(annotation, type):
        return annotation.__name__
    return str(annotation).replace("typing.", "")


@dataclasses.dataclass(frozen=True)
class Range:
    """Valid numbers: between lo and hi (None: unbounded), each bound closed unless *_open."""
    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    hi_open: bool = False

    def ok(self, value: Any) -> bool:
        if self.lo is not None and (value <= self.lo if self.lo_open else value < self.lo):
            return False
        return self.hi is None or (value < self.hi if self.hi_open else value <= self.hi)

    def __str__(self) -> str:
        lo, hi = _number(self.lo), _number(self.hi)
        if self.lo is not None and self.hi is not None:
            return f"in {'(' if self.lo_open else '['}{lo}, {hi}{')' if self.hi_open else ']'}"
        if self.lo is not None:
            return f"{'>' if self.lo_open else '>='} {lo}"
        return f"{'<' if self.hi_open else '<='} {hi}" if self.hi is not None else "any"


def _number(x: float | None) -> str:
    if x is None:
        return ""
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


@dataclasses.dataclass(frozen=True)
class OneOf:
    """Valid values: one of `choices`."""
    choices: tuple

    def ok(self, value: Any) -> bool:
        return value in self.choices

    def __str__(self) -> str:
        return f"one of {list(self.choices)}"


POSITIVE = Range(0, None, lo_open=True)
NON_NEGATIVE = Range(0)
AT_LEAST_ONE = Range(1)
PROBABILITY = Range(0, 1)
SEED = Range(0, 2**31 - 1)


def hp(default: Any, help: str, valid: Range | OneOf | None = None) -> Any:
    """A dataclass field with a default, the one-line meaning shown in the hparams reference and
    the values it accepts (checked with every hparam's type before a run starts)."""
    metadata = {"help": help, "valid": valid}
    if isinstance(default, (list, dict)):
        return dataclasses.field(default_factory=lambda: json.loads(json.dumps(default)),
                                 metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


@dataclasses.dataclass
class HParams:
    """Base class: subclasses declare fields with defaults and a trailing comment each."""

    def field_names(self) -> list[str]:
        return [f.name for f in dataclasses.fields(self) if f.init]

    def update(self, values: Mapping[str, Any]) -> None:
        hints = typing.get_type_hints(type(self))
        names = self.field_names()
        for key, value in values.items():
            if key not in names:
                close = difflib.get_close_matches(key, names, n=3, cutoff=0.6)
                hint = f"; did you mean {', '.join(close)}?" if close else ""
                raise HParamError(f"Unknown hparam {key!r}{hint}")
            if not _type_ok(value, hints[key]):
                raise HParamError(
                    f"hparam {key!r} expects {_type_name(hints[key])}, got "
                    f"{type(value).__name__} {value!r}")
            if hints[key] is float and isinstance(value, int):
                value = float(value)
            setattr(self, key, value)

    @classmethod
    def from_hparams(cls: type[_H], model_name: str, data_dir: str,
                     hparams: str | Mapping[str, Any] | None = None) -> _H:
        """A run's settings: defaults, the user's hparams, what they imply, then the user's
        hparams again so they always win, then the remaining derived values and checks.

        For subclasses with `model_name` and `data_dir` fields; they fill in the hooks
        `_set_derived_defaults` (defaults implied by e.g. model size or debug mode) and
        `_finalize` (paths derived from data_dir and model_name, validation).
        """
        values = parse_hparams_arg(hparams)
        config = cls(model_name=model_name, data_dir=data_dir)
        config.update(values)
        config._set_derived_defaults()
        config.update(values)  # the user's values beat the derived defaults
        config.check_values()  # before anything is derived from them
        config.check_path_spellings()
        config._finalize()
        return config

    def check_values(self) -> None:
        """Every number is finite and within its field's `valid` range (HParamError naming the
        key, the valid values and the value)."""
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value is None or isinstance(value, bool):
                continue
            if isinstance(value, float) and not math.isfinite(value):
                raise HParamError(f"hparam {f.name!r} must be a finite number, got {value!r}")
            valid = f.metadata.get("valid")
            if valid is not None and not valid.ok(value):
                raise HParamError(f"hparam {f.name!r} must be {valid}, got {value!r}")

    def check_path_spellings(self) -> None:
        """Refuses a path (any string, also inside lists and dicts) that TensorFlow would read
        otherwise than meant: `file://` followed by a relative path (see fs.check_spelling)."""
        for f in dataclasses.fields(self):
            for where, text in _strings(getattr(self, f.name)):
                what = "--data-dir" if f.name == "data_dir" else f"hparam '{f.name}{where}'"
                try:
                    fs.check_spelling(text, what)
                except ValueError as e:
                    raise HParamError(str(e)) from None

    def check_output_paths(self, files: list[str], dirs: list[str]) -> None:
        """Refuses, before any work, output hparams naming a directory where a file is written
        (`files`) or a file where a directory is (`dirs`): the write would fail at the end."""
        for key in files:
            path = getattr(self, key)
            if path and fs.isdir(path):
                raise HParamError(f"hparam {key!r} is {path}, an existing directory; it names a "
                                  "file to write")
        for key in dirs:
            path = getattr(self, key)
            if path and fs.exists(path) and not fs.isdir(path):
                raise HParamError(f"hparam {key!r} is {path}, an existing file; it names a "
                                  "directory to write in")

    def check_outputs_apart(self, files: list[str], inputs: list[tuple[str, str | None]]) -> None:
        """Refuses output file hparams (`files`) that name a file the run reads (`inputs`: (what,
        path) pairs) or each other, however each is spelled (fs.same_place): writing one would
        replace the input, or the other output."""
        outputs = [(key, getattr(self, key)) for key in files if getattr(self, key)]
        for i, (key, path) in enumerate(outputs):
            others = [(f"hparam {k!r}", p) for k, p in outputs[i + 1:]]
            for what, source in inputs + others:
                if source and fs.same_place(path, source):
                    raise HParamError(f"hparam {key!r} is {path}, the same file as {what} "
                                      f"{source}: writing it would replace that; choose another "
                                      "path")

    @classmethod
    def valid_values(cls) -> dict[str, Range | OneOf | None]:
        """name -> the values the hparam accepts (None: any of its type)."""
        return {f.name: f.metadata.get("valid") for f in dataclasses.fields(cls) if f.init}

    def _set_derived_defaults(self) -> None:
        """Hook of from_hparams: defaults implied by the hparams set so far."""

    def _finalize(self) -> None:
        """Hook of from_hparams: values derived after the user's hparams, and checks."""

    def _apply_defaults(self, key: str, table: Mapping[Any, Mapping[str, Any]]) -> None:
        """Sets the defaults `table` lists for this config's value of hparam `key`."""
        value = getattr(self, key)
        if value not in table:
            raise HParamError(f"unknown {key} {value!r}; expected one of {sorted(table)}")
        for name, default in table[value].items():
            setattr(self, name, default)

    def _enforce(self, checks: list[tuple[bool, str, str]]) -> None:
        """Raises HParamError for the first (ok, key, rule) whose ok is false."""
        for ok, key, rule in checks:
            if not ok:
                raise HParamError(f"hparam {key!r} {rule}, got {getattr(self, key)!r}")

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.field_names()}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def describe(cls) -> list[tuple[str, str, Any, str]]:
        """(name, type, default, meaning) of every hparam, for the generated reference docs."""
        hints = typing.get_type_hints(cls)
        rows = []
        for f in dataclasses.fields(cls):
            if not f.init:
                continue
            default = f.default if f.default is not dataclasses.MISSING else (
                f.default_factory() if f.default_factory is not dataclasses.MISSING else None)
            rows.append((f.name, _type_name(hints[f.name]), default, f.metadata.get("help", "")))
        return rows
