"""A replacement never leaves a gap (issue 58, point 2).

`export_model.py --overwrite` (Hugging Face and SavedModel exports, Hugging Face imports: one
export_model.atomic_output_dir) replaced --output in two renames: a kill between them left no
--output and the old export hidden beside it. Now io_utils.replace_dir exchanges the two
directories in one step on Linux (renameat2), so --output is the old export or the new one at
every instant; where there is no such call it renames twice, and the next command there puts the
old export back (io_utils.recover_dir). Kills are simulated in-process: every rename, exchange
and delete of the replacement is a kill point in turn, and --output is checked before each.
"""
import logging
import os
import shutil

import pytest

import export_model
from util import fs, io_utils

from tests.test_interop_hf import pretrained_dir


class Killed(BaseException):
    """Stands for SIGKILL in-process: nothing on the way catches a BaseException."""


def contents(directory) -> dict[str, bytes] | None:
    """relative path -> bytes of every file below `directory`; None if it does not exist."""
    if not os.path.isdir(directory):
        return None
    found = {}
    for root, _, names in os.walk(directory):
        for name in names:
            with open(os.path.join(root, name), "rb") as f:
                found[os.path.relpath(os.path.join(root, name), directory)] = f.read()
    return found


OLD = {"which.txt": b"old", os.path.join("sub", "weights.txt"): b"old weights"}
NEW = {"which.txt": b"new", "config.json": b"{}"}


def write(directory, files: dict[str, bytes]) -> None:
    for name, text in files.items():
        os.makedirs(os.path.dirname(os.path.join(directory, name)), exist_ok=True)
        with open(os.path.join(directory, name), "wb") as f:
            f.write(text)


class KillAt:
    """fs.replace / fs.exchange / fs.rmtree patched: each call on `output` or a hidden sibling
    of it (`.<name>.*`: the replacement's own renames and deletes, not the files written inside
    the new export) is a step; `check` runs before every step, and the `at`-th step raises
    Killed instead."""

    def __init__(self, monkeypatch, output, at: int, check, exchange: bool = True):
        self.output, self.at, self.steps, self.check = str(output), at, [], check
        for name in ("replace", "rmtree", "exchange"):
            real = getattr(fs, name, None)
            if name == "exchange" and not exchange:
                real = lambda a, b: False  # noqa: E731 -- a system without renameat2
            monkeypatch.setattr(fs, name, self._step(name, real), raising=False)

    def _is_output(self, path) -> bool:
        path, name = str(path).rstrip("/"), os.path.basename(self.output)
        return os.path.dirname(path) == os.path.dirname(self.output) and (
            os.path.basename(path) == name or os.path.basename(path).startswith(f".{name}."))

    def _step(self, name, real):
        def step(*args):
            if any(self._is_output(a) for a in args):
                self.check(f"before {name}{args}")
                self.steps.append(name)
                if len(self.steps) == self.at:
                    raise Killed(name)
            return real(*args)
        return step


def replace_export(output: str) -> None:
    with export_model.atomic_output_dir(output, overwrite=True) as tmp:
        write(tmp, NEW)


def leftovers(parent) -> list[str]:
    return sorted(n for n in os.listdir(parent) if n.startswith("."))


@pytest.mark.parametrize("exchange", [True, False], ids=["renameat2", "two renames"])
def test_a_replacement_killed_at_any_step_leaves_the_old_or_the_new_export(tmp_path, monkeypatch,
                                                                         exchange):
    steps = None
    for at in range(1, 10):
        work = tmp_path / f"k{at}"
        output = str(work / "out")
        write(output, OLD)

        def whole(when):
            # With an exchange, never a gap; with two renames, the one between them.
            assert contents(output) in (OLD, NEW) or not exchange, when

        with monkeypatch.context() as patch:
            kill = KillAt(patch, output, at, whole, exchange)
            try:
                replace_export(output)
            except Killed:
                pass
            else:
                steps = kill.steps
                break
        whole(f"after a kill at step {at} ({kill.steps})")
        # The next command there: what the kill left is put right before anything else.
        with pytest.raises(ValueError, match="already exists"):
            with export_model.atomic_output_dir(output):
                pass
        assert contents(output) in (OLD, NEW) and leftovers(work) == [], (at, kill.steps)
    assert steps == (["exchange", "rmtree"] if exchange else ["exchange", "replace", "replace",
                                                             "rmtree"])


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return pretrained_dir(tmp_path_factory.mktemp("pretrained"))


def test_export_overwrite_killed_between_its_renames_gets_the_old_export_back(
        model, tmp_path, monkeypatch, caplog):
    output = str(tmp_path / "hf")
    args = ["--model-dir", model, "--format", "huggingface", "--output", output]
    assert export_model.main(args) == 0
    write(output, {"mine.txt": b"a file the user put there"})
    before = contents(output)
    with monkeypatch.context() as patch:
        KillAt(patch, output, 3, lambda when: None, exchange=False)  # exchange, replace: killed here
        with pytest.raises(Killed):
            export_model.main(args + ["--overwrite"])
    assert not os.path.exists(output)  # the gap of a system without renameat2
    caplog.set_level(logging.WARNING)
    assert export_model.main(args) == 2  # no --overwrite: the old export is back, and kept
    assert contents(output) == before and leftovers(tmp_path) == []
    assert "put back" in caplog.text


def test_export_overwrite_killed_after_the_exchange_leaves_the_new_export(model, tmp_path,
                                                                          monkeypatch):
    output = str(tmp_path / "hf")
    args = ["--model-dir", model, "--format", "huggingface", "--output", output]
    assert export_model.main(args) == 0
    shutil.rmtree(os.path.join(output))
    write(output, OLD)
    with monkeypatch.context() as patch:
        KillAt(patch, output, 2, lambda when: None)  # exchange done, killed before the old is deleted
        with pytest.raises(Killed):
            export_model.main(args + ["--overwrite"])
    assert "model.safetensors" in os.listdir(output)
    assert len(leftovers(tmp_path)) == 1  # the old export, aside
    assert export_model.main(args) == 2
    assert "model.safetensors" in os.listdir(output) and leftovers(tmp_path) == []
