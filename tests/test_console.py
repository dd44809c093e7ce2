"""A quiet console (util/console.py): TensorFlow's start-up lines stay off a user's terminal."""
import ast
import os
import pathlib
import subprocess
import sys

from util import console

ROOT = pathlib.Path(__file__).resolve().parent.parent
ENTRY_POINTS = ["build_pretraining_dataset.py", "run_pretraining.py", "run_finetuning.py",
                "predict.py", "score_text.py", "export_model.py", "tools/probe.py",
                "tools/inspect_run.py"]


def test_every_entry_point_imports_console_before_anything_that_can_import_tensorflow():
    """TF_CPP_MIN_LOG_LEVEL only counts when set before TensorFlow loads."""
    for name in ENTRY_POINTS:
        tree = ast.parse((ROOT / name).read_text())
        before = []
        for node in tree.body:
            if isinstance(node, ast.ImportFrom) and node.module == "util" and any(
                    a.name == "console" for a in node.names):
                break
            if isinstance(node, ast.Import):
                before += [a.name.split(".")[0] for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                before.append((node.module or "").split(".")[0])
        else:
            raise AssertionError(f"{name} does not import util.console")
        assert set(before) <= sys.stdlib_module_names, (name, before)


def _stderr(*args, **env) -> list[str]:
    environ = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    result = subprocess.run([sys.executable, "score_text.py", "--model-dir", "/nonexistent",
                             "w1", *args], cwd=ROOT, env=dict(environ, **env),
                            capture_output=True, text=True, check=False)
    assert result.returncode == 2, result.stderr
    return result.stderr.splitlines()


def test_a_command_prints_only_its_own_lines():
    # TF_ENABLE_ONEDNN_OPTS=1: the oneDNN start-up lines that TensorFlow 2.21 writes through absl
    # before any level applies, on every host kind (AVX-512 hosts print them unasked).
    assert _stderr(TF_ENABLE_ONEDNN_OPTS="1") == ["ERROR model dir /nonexistent does not exist"]


def test_filtered_startup_keeps_errors_and_python_lines_in_order():
    caught = ("WARNING: All log messages before absl::InitializeLog() is called are written to "
              "STDERR\n"
              "I0000 00:00:1795733699.444431    2103 port.cc:153] oneDNN custom operations are on.\n"
              "I0000 00:00:1795733699.476240    2103 cpu_feature_guard.cc:227] This TensorFlow "
              "binary is optimized.\n"
              "To enable the following instructions: AVX2, rebuild TensorFlow.\n"
              "W1126 22:54:03.000001    2103 some.cc:1] a warning\n"
              "E1126 22:54:03.000002    2103 other.cc:2] a real error\n"
              "continued\n"
              "/x.py:3: UserWarning: from Python\n")
    assert console.filter_startup_lines(caught, 2) == (
        "E1126 22:54:03.000002    2103 other.cc:2] a real error\ncontinued\n"
        "/x.py:3: UserWarning: from Python\n")
    assert console.filter_startup_lines(caught, 1).count("\n") == 4  # + the warning


def _level_after_import(argv: list[str], **env) -> str:
    environ = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    code = (f"import os, sys; sys.argv = {['cmd', *argv]!r}; from util import console; "
            "print(os.environ.get('TF_CPP_MIN_LOG_LEVEL'))")
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=dict(environ, **env),
                          capture_output=True, text=True, check=True).stdout.strip()


def test_verbose_or_an_explicit_level_brings_tensorflows_lines_back():
    assert _level_after_import(["--data-dir", "d"]) == "2"
    assert _level_after_import(["--data-dir", "d", "--verbose"]) == "None"
    assert _level_after_import([], TF_CPP_MIN_LOG_LEVEL="0") == "0"
