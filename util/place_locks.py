"""One run per place: a command holds a RunLock on every real place it writes.

Two kinds of place:
  - a directory the command writes into (a model dir, a trial dir, a feature cache, a dataset):
    locked from inside, `<dir>/.run.lock`, the lock run_pretraining.py has always taken;
  - a file, or a directory the command replaces whole (an export): locked from beside it,
    `<parent>/.<name>.lock`, since anything inside goes with the replacement.

Both are keyed on fs.place, so every spelling of a place (a symlink, `..`, `./`, `//`, a file://
URL) meets the same lock file, and a second run reaching it under another name is refused
naming the place, the owner and the lock file. A place inside a directory the same command
already locks is covered by that lock. Two outputs of one command that are one place are
refused too (RunLock keeps the locks a process holds). On object stores the lock is a lease
(see training_utils.RunLock).
"""
import contextlib
import os
from typing import Iterator, NamedTuple

from util import fs
from util.training_utils import RunLock, RunLockError  # noqa: F401 -- for the commands' except


class Place(NamedTuple):
    what: str  # for messages: "hparam 'model_dir'", "--output"
    path: str
    written_into: bool  # True: a directory written into; False: a file or a replaced directory


def lock_for(place: Place) -> RunLock:
    """The RunLock guarding `place` (not yet acquired)."""
    guards = f"{place.what} {place.path}"
    if place.written_into:
        fs.makedirs(_home(place))  # the lock file lives in it
        return RunLock(_home(place), guards=guards)
    return RunLock(_home(place), filename=f".{os.path.basename(fs.place(place.path))}.lock",
                   guards=guards)


def _home(place: Place) -> str:
    """The directory the lock file of `place` lives in, where it really is."""
    real = fs.place(place.path)
    return real if place.written_into else os.path.dirname(real)


def _covered(place: Place, locked_dirs: list[str]) -> bool:
    return any(fs.relation(place.path, d) == "inside" for d in locked_dirs)


class Locks(list):
    """The locks a run holds; heartbeat() refreshes them all (see RunLock.heartbeat)."""

    def heartbeat(self) -> None:
        for lock in self:
            lock.heartbeat()


@contextlib.contextmanager
def holding(places: list[Place]) -> Iterator[Locks]:
    """Acquires a lock on each place in order (RunLockError at the first one in use, after
    releasing those taken) and yields them; releases them all on exit."""
    with contextlib.ExitStack() as stack:
        locks, locked_dirs = Locks(), []
        for place in places:
            if not place.path or _covered(place, locked_dirs):
                continue
            if not fs.exists(_home(place)):
                # Made for the lock alone if the run ends before writing there: not left behind.
                stack.callback(fs.remove_if_empty, _home(place))
            locks.append(stack.enter_context(lock_for(place)))
            if place.written_into:
                locked_dirs.append(place.path)
        yield locks
