"""The project's commands in child processes forked from an interpreter that has already imported
TensorFlow and the project: a test that starts `python run_pretraining.py ...` pays the fork (a few
milliseconds) instead of TensorFlow's import (4-6 CPU-seconds on this machine).

    proc = preloaded.Popen([sys.executable, "run_pretraining.py", ...], env=..., stderr=PIPE)
    done = preloaded.run([sys.executable, "-c", code, ...], capture_output=True, text=True)

`Popen` and `run` take what `subprocess.Popen` and `subprocess.run` take and give what they give
(pid, poll, wait, communicate, send_signal, kill, returncode; exit codes negative for signals). A
child is a real process of its own: it runs the script (or `-c` code) as `__main__` with its own
argv, environment, working directory and standard streams, handles signals and exits through the
interpreter's own exit path (atexit, flushing), as a started one would. What it does not repeat
is start-up: the interpreter's hash seed is the server's and the modules are imported already.
So each test worker keeps two servers with different hash seeds and alternates them, and a
child reseeds Python's and NumPy's global generators. A launch that start-up could change runs as
a plain subprocess instead: an interpreter other than this one, an option before the script,
`--verbose` (the commands then show TensorFlow's start-up lines) or a different value of a
variable read at start-up (`PYTHON*` but `PYTHONPATH`, and `TF_*` but `TF_CONFIG`).
ELECTRA_TESTS_PRELOADED=0 turns the servers off (every launch a plain subprocess).

tests/test_console.py and tests/test_demo.py start real interpreters on purpose: they test
start-up itself.
"""
import atexit
import itertools
import json
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Imported once by each server: what the commands import (their imports import the rest).
PRELOAD = ("numpy", "tensorflow", "run_pretraining", "run_finetuning", "build_pretraining_dataset",
           "score_text", "predict", "export_model", "tools.kill_resume", "tools.probe")
_INT32 = struct.Struct("!i")
PIPE, DEVNULL, STDOUT = subprocess.PIPE, subprocess.DEVNULL, subprocess.STDOUT


# -- the server (a process of its own: `python tests/preloaded.py SOCKET`) --------------------

def _serve(path: str):
    """Forks a child per request; sends the client the child's pid, then its exit code. Returns
    the request in the child (which runs it at the top level), never in the server."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(16)
    # A child's exit wakes the loop (a byte on `woken`); it sleeps otherwise.
    woken, wake = os.pipe()
    os.set_blocking(wake, False)
    signal.set_wakeup_fd(wake)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    os.write(1, b"ready\n")
    children: dict[int, socket.socket] = {}
    while True:
        readable, _, _ = select.select([listener, sys.stdin, woken], [], [])
        if sys.stdin in readable and not os.read(sys.stdin.fileno(), 1):
            return None  # the test worker went away
        if woken in readable:
            os.read(woken, 4096)
        while children:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            client = children.pop(pid)
            try:
                client.sendall(_INT32.pack(os.waitstatus_to_exitcode(status)))
            except OSError:
                pass
            client.close()
        if listener not in readable:
            continue
        client, _ = listener.accept()
        header, fds, _, _ = socket.recv_fds(client, _INT32.size, 3)  # the fds come with it
        header += _recv_exactly(client, _INT32.size - len(header))
        body = _recv_exactly(client, _INT32.unpack(header)[0])
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            os.close(woken)
            os.close(wake)
            listener.close()
            for other in children.values():
                other.close()
            client.close()
            for target, fd in enumerate(fds):
                os.dup2(fd, target)
                os.close(fd)
            return json.loads(body)
        for fd in fds:
            os.close(fd)
        client.sendall(_INT32.pack(pid))
        children[pid] = client


def _recv_exactly(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise EOFError("the preloaded interpreter closed the connection")
        data += chunk
    return data


def _become(request: dict):
    """In the forked child: take the request's argv, environment and directory, then run it."""
    import random
    import numpy as np
    random.seed()
    np.random.seed()
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    argv = request["argv"]
    extra = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if argv[0] == "-c":
        sys.argv = ["-c"] + argv[2:]
        sys.path[:] = [""] + extra + _SITE
        import types
        main = types.ModuleType("__main__")
        main.__builtins__ = __builtins__
        sys.modules["__main__"] = main
        exec(argv[1], main.__dict__)  # as `python -c` runs it (the file name "<string>")
    else:
        import runpy
        script = argv[0]
        sys.argv = list(argv)
        sys.path[:] = [os.path.dirname(os.path.realpath(script))] + extra + _SITE
        runpy.run_path(script, run_name="__main__")


# -- the client (in the test worker) -----------------------------------------------------------

_servers: list = []
_server_env: dict | None = None  # the environment the servers were started with
_next = itertools.count()
_lock = threading.Lock()


def _startup_env() -> dict:
    """The servers' environment: the test worker's, with what the tests' commands set."""
    return dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL="2")


def _read_at_startup(name: str) -> bool:
    """PYTHONPATH is not: each child gets its own sys.path."""
    return (name.startswith("PYTHON") and name != "PYTHONPATH") or (
        name.startswith("TF_") and name != "TF_CONFIG")


def _fits(argv: list, env: dict) -> bool:
    if os.environ.get("ELECTRA_TESTS_PRELOADED", "1") == "0" or len(argv) < 2:
        return False
    if argv[0] != sys.executable or "--verbose" in argv:
        return False
    if argv[1] == "-c":
        if len(argv) < 3:
            return False
    elif argv[1].startswith("-"):
        return False
    base = _server_env if _server_env is not None else _startup_env()
    keys = {k for k in set(base) | set(env) if _read_at_startup(k)}
    return all(base.get(k) == env.get(k) for k in keys)


def _server_path() -> str:
    """The socket of the next server (two per test worker, alternated), started when first used."""
    global _server_env
    with _lock:
        if not _servers:
            atexit.register(_stop_servers)
            _server_env = _startup_env()
            directory = tempfile.mkdtemp(prefix="preloaded-")
            for index in range(2):
                path = os.path.join(directory, f"s{index}")
                proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), path],
                                        env=_server_env, cwd=REPO, stdin=PIPE, stdout=PIPE,
                                        stderr=DEVNULL)
                _servers.append((proc, path))
            for proc, _ in _servers:
                if proc.stdout.readline() != b"ready\n":
                    raise RuntimeError("the preloaded interpreter did not start")
        return _servers[next(_next) % len(_servers)][1]


def _stop_servers():
    for proc, _ in _servers:
        proc.stdin.close()
        proc.wait(timeout=30)


class Popen:
    """subprocess.Popen's interface for a child of a preloaded interpreter (or a plain one when
    the launch does not fit: see the module's docstring)."""

    def __new__(cls, args, **kwargs):
        env = dict(kwargs.get("env") or os.environ)
        if not _fits(list(args), env):
            return subprocess.Popen(args, **kwargs)
        return super().__new__(cls)

    def __init__(self, args, env=None, cwd=None, stdin=None, stdout=None, stderr=None,
                 text=False, universal_newlines=None):
        self.args = list(args)
        text = bool(text or universal_newlines)
        self.returncode = None
        ends, mine = [], []  # the child's ends of its standard streams; the pipes this side keeps
        devnull = None
        for index, spec in enumerate((stdin, stdout, stderr)):
            if spec is None:
                ends.append(os.dup(index))
            elif spec == DEVNULL:
                devnull = devnull or os.open(os.devnull, os.O_RDWR)
                ends.append(os.dup(devnull))
            elif spec == PIPE:
                read, write = os.pipe()
                ends.append(read if index == 0 else write)
                mine.append(write if index == 0 else read)
            elif spec == STDOUT and index == 2:
                ends.append(os.dup(ends[1]))
            else:
                ends.append(os.dup(spec if isinstance(spec, int) else spec.fileno()))
        if devnull is not None:
            os.close(devnull)
        pipes = iter(mine)

        def wrap(spec, mode):
            if spec != PIPE:
                return None
            return open(next(pipes), mode + ("" if text else "b"), encoding="utf-8" if text
                        else None, errors="replace" if text else None)
        self.stdin, self.stdout = wrap(stdin, "w"), wrap(stdout, "r")
        self.stderr = wrap(stderr, "r")
        request = json.dumps({"argv": self.args[1:], "env": dict(env or os.environ),
                              "cwd": os.path.abspath(cwd or os.getcwd())}).encode()
        self._conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._conn.connect(_server_path())
        try:
            socket.send_fds(self._conn, [_INT32.pack(len(request))], ends)
            self._conn.sendall(request)
            self.pid = _INT32.unpack(_recv_exactly(self._conn, _INT32.size))[0]
        finally:
            for fd in ends:
                os.close(fd)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for stream in (self.stdin, self.stdout, self.stderr):
            if stream:
                stream.close()
        self.wait()

    def _status(self, timeout) -> bool:
        if self.returncode is not None:
            return True
        self._conn.settimeout(timeout)
        try:
            self.returncode = _INT32.unpack(_recv_exactly(self._conn, _INT32.size))[0]
        except (socket.timeout, BlockingIOError):
            return False
        self._conn.close()
        return True

    def poll(self):
        self._status(0)
        return self.returncode

    def wait(self, timeout=None):
        if not self._status(timeout):
            raise subprocess.TimeoutExpired(self.args, timeout)
        return self.returncode

    def communicate(self, input=None, timeout=None):
        if self.stdin is not None:
            if input:
                self.stdin.write(input)
            self.stdin.close()
        results = {}

        def drain(name, stream):
            results[name] = stream.read()
        readers = [threading.Thread(target=drain, args=(name, stream), daemon=True)
                   for name, stream in (("out", self.stdout), ("err", self.stderr)) if stream]
        for reader in readers:
            reader.start()
        self.wait(timeout)
        for reader in readers:
            reader.join()
        for stream in (self.stdout, self.stderr):
            if stream:
                stream.close()
        return results.get("out"), results.get("err")

    def send_signal(self, sig):
        if self.poll() is None:
            os.kill(self.pid, sig)

    def terminate(self):
        self.send_signal(signal.SIGTERM)

    def kill(self):
        self.send_signal(signal.SIGKILL)


def run(args, *, capture_output=False, timeout=None, check=False, input=None, **kwargs):
    """subprocess.run for a child of a preloaded interpreter."""
    if capture_output:
        kwargs["stdout"] = kwargs["stderr"] = PIPE
    if input is not None:
        kwargs["stdin"] = PIPE
    proc = Popen(args, **kwargs)
    try:
        out, err = proc.communicate(input, timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise
    done = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    if check:
        done.check_returncode()
    return done


if __name__ == "__main__":
    _SITE = [p for p in sys.path[1:] if p != REPO]  # the interpreter's own, without PYTHONPATH
    sys.path.insert(0, REPO)
    import gc
    import importlib
    for name in PRELOAD:
        importlib.import_module(name)
    # What the imports made lives as long as a child does: out of the collector's sight, a
    # child's pages stay shared and its exit does not walk them (1 s less per child).
    gc.freeze()
    _request = _serve(sys.argv[1])
    if _request is not None:
        del _serve, importlib, gc
        _become(_request)
