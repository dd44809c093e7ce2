"""Resuming a run directory under the current hparams: one rule, two policies.

`split_changes(saved, current, refused)` compares the hparams a run directory was written with
against the current ones (keys both know: a key added by a later version is no change) and
splits the differences into refused and allowed ones:
- pre-training refuses the hparams that define the model (pretrain/run_setup.py ARCHITECTURE_KEYS)
  and allows the rest, logged (continued training: more steps, another learning rate);
- a fine-tuning trial refuses everything that changes what it learns and allows only the
  settings listed in finetune/trainer.py NOT_TRAINING_SETTINGS (batch sizes of evaluation,
  paths, logging).
"""
from typing import Any, Callable


def split_changes(saved: dict, current: dict, refused: Callable[[str], bool],
                  ignore: frozenset = frozenset()) -> tuple[list[str], list[str]]:
    """(refused changes, allowed changes), each "key: saved -> current", sorted by key."""
    out: tuple[list[str], list[str]] = ([], [])
    for key in sorted(set(saved) & set(current) - ignore):
        if saved[key] != current[key]:
            out[0 if refused(key) else 1].append(describe(key, saved[key], current[key]))
    return out


def describe(key: str, before: Any, after: Any) -> str:
    return f"{key}: {before!r} -> {after!r}"


def key_changes(saved: Any, current: Any, path: str = "") -> list[str]:
    """The leaves where two nested keys (dicts of settings, file hashes) differ, as
    "a.b.c: before -> after"; a changed content hash reads "content changed"."""
    if isinstance(saved, dict) and isinstance(current, dict):
        out = []
        for key in sorted(set(saved) | set(current), key=str):
            where = f"{path}.{key}" if path else str(key)
            if key not in saved:
                out.append(f"{where}: added")
            elif key not in current:
                out.append(f"{where}: removed")
            else:
                out += key_changes(saved[key], current[key], where)
        return out
    if saved == current:
        return []
    if all(isinstance(v, str) and len(v) == 64 for v in (saved, current)):
        return [f"{path}: content changed"]
    return [describe(path, saved, current)]
