"""tests/preloaded.py: a child of a preloaded interpreter behaves as a started process would
where the tests look (argv, environment, directory, streams, exit codes, signals, seeds)."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

import preloaded

CHILD = """
import json, os, random, sys
import tensorflow as tf
print(json.dumps({"name": __name__, "argv": sys.argv, "cwd": os.getcwd(), "path0": sys.path[0],
                  "var": os.environ.get("PRELOADED_TEST_VAR"), "input": sys.stdin.read(),
                  "hash": hash("electra"), "random": random.random(),
                  "tf": int(tf.constant(2) * 3)}))
print("to stderr", file=sys.stderr)
sys.exit(int(sys.argv[1]))
"""


def _env(**extra):
    return dict(os.environ, PYTHONPATH=os.path.dirname(preloaded.__file__), **extra)


@pytest.mark.skipif(os.environ.get("ELECTRA_TESTS_PRELOADED") == "0",
                    reason="ELECTRA_TESTS_PRELOADED=0: every launch is a plain subprocess")
def test_children_run_their_own_command_and_report_how_they_ended(tmp_path):
    script = tmp_path / "child.py"
    script.write_text(CHILD, encoding="utf-8")
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    # Started together: they run side by side, as the tests' workers do.
    pipe = subprocess.PIPE
    procs = {
        "code": preloaded.Popen([sys.executable, "-c", CHILD, "3"], cwd=str(tmp_path),
                                env=_env(PRELOADED_TEST_VAR="a"), stdin=pipe, stdout=pipe,
                                stderr=pipe, text=True),
        "script": preloaded.Popen([sys.executable, str(script), "0"], env=_env(), stdin=pipe,
                                  stdout=pipe, stderr=subprocess.STDOUT),
        "killed": preloaded.Popen(sleeper, env=_env()),
        "terminated": preloaded.Popen(sleeper, env=_env()),
        "failed": preloaded.Popen([sys.executable, "-c", "raise ValueError('bad input')"],
                                  env=_env(), stderr=pipe, text=True),
    }
    assert all(isinstance(p, preloaded.Popen) for p in procs.values())
    assert procs["killed"].poll() is None
    time.sleep(0.2)
    procs["killed"].kill()
    procs["terminated"].send_signal(signal.SIGTERM)

    out, err = procs["code"].communicate("typed", timeout=60)
    code = json.loads(out)
    assert procs["code"].returncode == 3 and err == "to stderr\n"
    assert code["name"] == "__main__" and code["argv"] == ["-c", "3"] and code["path0"] == ""
    assert code["cwd"] == str(tmp_path) and code["var"] == "a" and code["input"] == "typed"
    assert code["tf"] == 6
    out, _ = procs["script"].communicate(b"", timeout=60)
    lines = out.decode().splitlines()
    from_script = json.loads(lines[0])
    assert procs["script"].returncode == 0 and lines[1] == "to stderr"
    assert from_script["argv"] == [str(script), "0"] and from_script["path0"] == str(tmp_path)
    assert from_script["var"] is None and from_script["cwd"] == os.getcwd()
    # Consecutive launches come from the two servers: different hash seeds, as two processes
    # started apart would have; Python's generator is reseeded in each child.
    assert code["hash"] != from_script["hash"] and code["random"] != from_script["random"]

    assert procs["killed"].wait(timeout=60) == -signal.SIGKILL
    assert procs["terminated"].wait(timeout=60) == -signal.SIGTERM
    _, err = procs["failed"].communicate(timeout=60)
    assert procs["failed"].returncode == 1 and err.rstrip().endswith("ValueError: bad input")
    done = preloaded.run([sys.executable, "-c", "import sys; sys.exit(4)"], env=_env())
    assert done.returncode == 4 and done.stdout is None


def test_a_launch_that_start_up_could_change_is_a_plain_subprocess():
    for argv, env in (([sys.executable, "-c", "pass"], _env(TF_CPP_MIN_LOG_LEVEL="0")),
                      ([sys.executable, "-c", "pass", "--verbose"], _env()),
                      ([sys.executable, "-I", "-c", "pass"], _env())):
        proc = preloaded.Popen(argv, env=env)
        assert isinstance(proc, subprocess.Popen) and proc.wait(timeout=60) == 0
