"""Worker processes whose death is noticed: tasks run in spawned processes, and a worker that
dies (the kernel's out-of-memory killer, a SIGKILL, a crash in native code) stops the parent
within a fraction of a second, naming the worker, its fate and the task it held.

multiprocessing.Pool, used before, replaces a dead worker and waits for its task forever, without
a word. Here the parent hands each worker one task at a time over its own pipe and waits on the
pipes and the processes' sentinels together, so it knows which task a worker held when it died.
"""
import multiprocessing
import multiprocessing.connection
import signal
from typing import Any, Callable, Sequence

# The exit status of a command whose worker process died (documented in RELIABILITY.md). Its
# finished work is kept; re-running the same command resumes.
EXIT_WORKER_DIED = 4


class WorkerDied(RuntimeError):
    """A worker process ended without finishing its task."""

    def __init__(self, message: str, exitcode: int | None = None):
        super().__init__(message)
        self.exitcode = exitcode  # None: not known (a peer of a multi-worker run)


def fate(exitcode: int) -> str:
    """'was killed by SIGKILL (...)' or 'exited with status 1': a process's end in words."""
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        why = (" (the kernel's out-of-memory killer sends it when memory runs out)"
               if -exitcode == signal.SIGKILL else "")
        return f"was killed by {name}{why}"
    return f"exited with status {exitcode}"


def _serve(function: Callable, connection) -> None:
    """A worker's life: run the tasks the parent sends until it sends None (or goes away)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle

    def report(*args) -> None:
        connection.send(("progress", args))

    while True:
        try:
            task = connection.recv()
        except EOFError:  # the parent is gone: nobody wants the rest
            return
        if task is None:
            return
        try:
            result = function(task, report)
        except Exception as e:
            try:
                connection.send(("error", e))
            except Exception:  # it does not cross the pipe: its text does
                connection.send(("error", RuntimeError(f"{type(e).__name__}: {e}")))
            return
        connection.send(("done", result))


def run(function: Callable[[Any, Callable], Any], tasks: Sequence, num_processes: int,
        on_progress: Callable[..., None],
        describe: Callable[[Any], str] = lambda task: "running a task") -> list:
    """`function(task, report)` for every task in `num_processes` spawned processes; returns the
    results in the order of `tasks`. `report(*args)` in a worker calls `on_progress(*args)` here.

    A worker's exception is raised here. A worker that dies raises WorkerDied ("worker process
    P was killed by SIGKILL (...) while <describe(task)>"). Either way the other workers are
    stopped first. `function` must be importable by name (a module-level function):
    workers are spawned, not forked, because the caller may hold TensorFlow's threads, and
    forking those can deadlock."""
    context = multiprocessing.get_context("spawn")
    pending = list(enumerate(tasks))
    results: list = [None] * len(tasks)
    links: dict = {}  # worker -> the parent's end of its pipe
    held: dict = {}  # worker -> (index, task) it is running
    try:
        for _ in range(min(num_processes, len(pending))):
            mine, theirs = context.Pipe()
            worker = context.Process(target=_serve, args=(function, theirs), daemon=True)
            worker.start()
            theirs.close()
            links[worker] = mine
        for worker in links:
            _hand_out(worker, links[worker], pending, held)
        while held:
            ready = multiprocessing.connection.wait(
                [links[w] for w in held] + [w.sentinel for w in held])
            for worker in list(held):
                link, gone = links[worker], False
                while worker in held and link.poll():
                    try:
                        kind, payload = link.recv()
                    except EOFError:  # the worker's end closed: it is gone
                        gone = True
                        break
                    if kind == "progress":
                        on_progress(*payload)
                    elif kind == "error":
                        raise payload
                    else:
                        results[held.pop(worker)[0]] = payload
                        _hand_out(worker, link, pending, held)
                if worker in held and (gone or worker.sentinel in ready):
                    worker.join()
                    raise WorkerDied(f"worker process {worker.pid} {fate(worker.exitcode)} while "
                                     f"{describe(held[worker][1])}", worker.exitcode)
    finally:
        for worker, link in links.items():
            link.close()  # an idle worker reads the end of its pipe and exits
            if worker in held and worker.is_alive():
                worker.terminate()
        for worker in links:
            worker.join(timeout=5)
            if worker.is_alive():
                worker.kill()
                worker.join()
    return results


def _hand_out(worker, link, pending: list, held: dict) -> None:
    """The next task to an idle worker, or None: its work is done and it exits."""
    if pending:
        held[worker] = pending.pop(0)
    try:
        link.send(held[worker][1] if worker in held else None)
    except OSError:  # it died meanwhile: the end of its pipe and its exit code say how
        pass
