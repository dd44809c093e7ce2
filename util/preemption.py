"""Preemption: SIGTERM and SIGINT ask a run to stop at the next step boundary and save.

Spot VMs, TPU slices, Slurm and Kubernetes send SIGTERM and allow a short grace period before
SIGKILL. Inside `PreemptionGuard` the signal does not kill the process: it sets a stop flag that
the training loops read in-graph after every step, so even a loop of hundreds of steps ends at
the next step boundary; the trainer then writes a checkpoint with the usual atomic protocol and
raises `Preempted`, and the command exits with `EXIT_PREEMPTED`. The phases between (evaluation,
probes, featurization, predict.py) call `check` at every batch and stop there, unwritten.

Why a watcher thread: Python runs signal handlers only in the main thread, between bytecodes,
and the main thread is inside TensorFlow for the whole of a training loop. The C-level handler
does write the signal number to the wakeup fd at once, so a thread reading that fd can set the
in-graph flag while the loop runs.

A second signal while the run is stopping is logged and ignored: the checkpoint being written
stays atomic either way (SIGKILL leaves the previous checkpoint in place).
"""
import logging
import math
import os
import signal
import socket
import sys
import threading
import time

import tensorflow as tf

from util import distribution

log = logging.getLogger(__name__)
_active = None  # the entered PreemptionGuard, if any

# sysexits.h EX_TEMPFAIL ("temporary failure; the user is invited to retry"): preempted, the
# state is saved, re-run the same command. Other statuses: 0 done, 2 bad input, 3 diverged.
EXIT_PREEMPTED = 75
SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Preempted(Exception):
    """The run stopped on a signal after saving its state; re-running the command resumes it."""


class PreemptionGuard:
    """Context manager: while active, SIGTERM/SIGINT request a stop instead of killing.

    `requested` says whether a stop was asked for; `flag()` is a tf.Variable(bool) the training
    loops read after each step (created on first use: MultiWorkerMirroredStrategy must be created
    before any TensorFlow object exists).
    """

    def __init__(self, signals=SIGNALS):
        self.signals = tuple(signals)
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._flag = None
        self.signal_name: str | None = None
        self.signal_time: float | None = None  # time.monotonic() of the first signal
        self._previous: dict = {}
        self._previous_wakeup = -1
        self._sockets = None
        self._thread = None

    @property
    def requested(self) -> bool:
        return self._event.is_set()

    def flag(self) -> tf.Variable:
        with self._lock:
            if self._flag is None:
                with tf.init_scope():
                    self._flag = tf.Variable(self._event.is_set(), trainable=False,
                                             name="preemption_requested")
            return self._flag

    def seconds_since_signal(self) -> float | None:
        return None if self.signal_time is None else time.monotonic() - self.signal_time

    def request(self, signum: int) -> None:
        """Records a stop request (from the watcher thread, the handler, or a test)."""
        name = signal.Signals(signum).name
        with self._lock:
            first = not self._event.is_set()
            if first:
                self.signal_name, self.signal_time = name, time.monotonic()
                self._event.set()
            flag = self._flag
        if not first:
            return
        if flag is not None:
            if threading.current_thread() is threading.main_thread():
                # The handler can run in the middle of tracing a tf.function: an assign here
                # would enter the graph being built (and deadlock on its lock). Another thread
                # has no graph of its own in progress.
                threading.Thread(target=flag.assign, args=(True,), daemon=True,
                                 name="preemption-flag").start()
            else:
                flag.assign(True)
        log.warning("%s received: stopping at the next step boundary to save a checkpoint "
                    "(exit status %d: re-run the same command to resume)", name, EXIT_PREEMPTED)

    def _handler(self, signum, frame) -> None:
        # Runs late (when the main thread leaves TensorFlow's C++ code, possibly mid-tracing);
        # the watcher has usually seen the signal already. Its only jobs: not to kill the
        # process, and to cover a lost wakeup.
        self.request(signum)

    def _watch(self, reader: socket.socket) -> None:
        received = 0
        while True:
            try:
                data = reader.recv(64)
            except OSError:
                return
            if not data:
                return
            for signum in data:
                if signum not in self.signals:
                    continue
                received += 1
                if received == 1:
                    self.request(signum)
                else:
                    log.warning("%s received again: the run is already stopping and writes its "
                                "checkpoint atomically; SIGKILL would abandon it and leave the "
                                "previous checkpoint in place", signal.Signals(signum).name)

    def __enter__(self) -> "PreemptionGuard":
        if threading.current_thread() is not threading.main_thread():
            raise RuntimeError("PreemptionGuard must be entered in the main thread")
        reader, writer = socket.socketpair()
        writer.setblocking(False)
        self._sockets = (reader, writer)
        self._previous_wakeup = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
        self._previous = {s: signal.signal(s, self._handler) for s in self.signals}
        self._thread = threading.Thread(target=self._watch, args=(reader,), daemon=True,
                                        name="preemption-watcher")
        self._thread.start()
        global _active
        _active = self
        return self

    def __exit__(self, *exc) -> None:
        global _active
        _active = None
        for s, handler in self._previous.items():
            signal.signal(s, handler)
        signal.set_wakeup_fd(self._previous_wakeup)
        reader, writer = self._sockets
        writer.close()  # the watcher's recv returns b"" and it ends
        self._thread.join(timeout=5)
        reader.close()


def install() -> PreemptionGuard:
    """`with preemption.install():` makes a guard the process's (the trainers find it)."""
    return PreemptionGuard()


def active() -> PreemptionGuard | None:
    """The installed guard, or None (library use, tests: signals keep their usual effect)."""
    return _active


def rearm() -> None:
    """Re-installs the guard's handlers. Call after creating a tf.distribute strategy:
    MultiWorkerMirroredStrategy's coordination service installs a C++ SIGTERM handler of its own
    (for tf.distribute's PreemptionCheckpointHandler), which silently replaces Python's, so the
    signal would neither stop the loop nor kill the process."""
    if _active is not None:
        for s in _active.signals:
            signal.signal(s, _active._handler)
        _active.flag()  # created now, outside any strategy scope or traced function


def requested(strategy: tf.distribute.Strategy | None = None) -> bool:
    """Whether a stop was requested here; with a MultiWorkerMirroredStrategy, whether one was
    on ANY worker (one all-reduce of the workers' votes), so that all of them take the same
    branch. A worker deciding alone would leave while the others wait for it in their next
    collective, until TensorFlow declares it dead and they fail (and nobody saves). Every
    worker must then call it at the same point of its program, like any collective."""
    local = _active is not None and _active.requested
    if not _is_multi_worker(strategy):
        return local
    return _any_worker(strategy, local)


def _is_multi_worker(strategy: tf.distribute.Strategy | None) -> bool:
    return strategy is not None and distribution.num_workers(strategy) > 1


_VOTE_FUNCTIONS: dict = {}  # id(strategy) -> (strategy, its traced all-reduce of one vote)


def _any_worker(strategy: tf.distribute.Strategy, vote: bool) -> bool:
    if id(strategy) not in _VOTE_FUNCTIONS:
        @tf.function(autograph=False)
        def total(value):
            return strategy.reduce(tf.distribute.ReduceOp.SUM,
                                   strategy.run(tf.identity, args=(value,)), axis=None)
        _VOTE_FUNCTIONS[id(strategy)] = (strategy, total)
    return float(_VOTE_FUNCTIONS[id(strategy)][1](tf.constant(float(vote)))) > 0


def describe() -> str:
    """'SIGTERM' / 'SIGINT', or why this process stops without a signal of its own."""
    if _active is not None and _active.signal_name:
        return _active.signal_name
    return "a signal to another worker"


def stopped(step: int, what: str = "") -> Preempted:
    """The Preempted error of a run (or `what`: "trial 2 ") that saved at `step` and stops."""
    waited = _active.seconds_since_signal() if _active is not None else None
    after = f", {waited:.1f}s after the signal" if waited is not None else ""
    return Preempted(f"{what}stopped on {describe()} at step {step}, checkpoint saved{after}; "
                     "re-run the same command to resume")


def check(doing: str, redo: str = "re-run the same command to do it",
          strategy: tf.distribute.Strategy | None = None) -> None:
    """Raises Preempted when a stop was requested. For the long phases with nothing to save
    (evaluation, probes, featurization, prediction), called at every batch: a signal ends them
    within one batch, before anything of theirs is written. `strategy`: for a phase every
    worker runs (see `requested`)."""
    if not requested(strategy):
        return
    waited = _active.seconds_since_signal() if _active is not None else None
    after = f", {waited:.1f}s after the signal" if waited is not None else ""
    raise Preempted(f"stopped on {describe()} during {doing}{after}; nothing of it was "
                    f"written; {redo}")


def deadline(last_save: float, every_secs: float) -> float:
    """The wall-clock time (time.time()) of the next time-based checkpoint (inf: none)."""
    return last_save + every_secs if every_secs and every_secs > 0 else math.inf


def exit_now(status: int) -> None:
    """Ends a training process without the interpreter's teardown: destroying TensorFlow's
    runtime took 1-4 s here, time a preempted run's grace period may not have and a finished
    run's user waits for. Everything a run keeps was already written (atomically) and its files
    closed; logs are flushed first."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(status)


class StopReason:
    """Why a training loop ended before its step count (codes the loops return)."""
    NONE, PREEMPTED, TIMED = 0, 1, 2


def stop_code(strategy: tf.distribute.Strategy, deadline_secs: tf.Tensor) -> tf.Tensor:
    """In-graph, after a step: 1 (preempted) if any worker was signalled, else 2 if any worker's
    clock passed the time-based checkpoint deadline, else 0. Every worker of a
    MultiWorkerMirroredStrategy gets the same answer (one all-reduce of two numbers per step),
    so all of them leave the loop at the same step."""
    guard = active()
    signalled = tf.cast(guard.flag().read_value(), tf.float32) if guard is not None \
        else tf.constant(0.0)
    timed = tf.cast(tf.timestamp() >= deadline_secs, tf.float32)
    votes = tf.stack([signalled, timed])
    if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        votes = strategy.reduce(tf.distribute.ReduceOp.SUM,
                                strategy.run(lambda: tf.identity(votes)), axis=None)
    return tf.where(votes[0] > 0, StopReason.PREEMPTED,
                    tf.where(votes[1] > 0, StopReason.TIMED, StopReason.NONE))
