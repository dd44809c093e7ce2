"""Nothing read from disk is unpickled or evaluated; hparams are JSON only.

A source scan (AST, so comments and strings do not count) over every .py file of the project for
the ways a file can run code when loaded: pickle and its relatives, eval/exec/compile, yaml's
full loader, torch.load, numpy's allow_pickle; plus behaviour checks that --hparams takes JSON
and nothing else.
"""
import ast
import json
import pathlib

import pytest

from util.hparams import HParamError, parse_hparams_arg

ROOT = pathlib.Path(__file__).resolve().parent.parent

# Modules whose loading functions unpickle (or unmarshal code).
UNSAFE_MODULES = {"pickle", "cPickle", "_pickle", "dill", "cloudpickle", "joblib", "shelve",
                  "marshal", "torch", "pandas"}
UNSAFE_BUILTINS = {"eval", "exec", "compile", "__import__", "execfile"}
# (file, construct) pairs that run the project's own code, never data; each says why.
ALLOWED = {
    ("tools/kill_resume.py", "runpy.run_path"):
        "runs run_pretraining.py / run_finetuning.py themselves under a kill hook",
    ("tests/preloaded.py", "runpy.run_path"):
        "a test's command in a child of a preloaded interpreter: runs the script it names",
    ("tests/preloaded.py", "exec"):
        "a test's `python -c CODE` in a child of a preloaded interpreter: runs the test's CODE",
    ("benchmarks/peer_inference_latency.py", "import torch"):
        "the PyTorch peer's latency probe, run with the peer's own python and never imported by "
        "the project; it loads no file (random weights) and torch.load stays banned",
}


def _python_files():
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT)
        if any(part.startswith(".") or part == "__pycache__" for part in rel.parts):
            continue
        yield rel, ast.parse(path.read_text(encoding="utf-8"), filename=str(rel))


def _dotted(node) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return ""


def _findings(rel, tree) -> list[str]:
    found = []
    for node in ast.walk(tree):
        where = f"{rel}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Import):
            found += [f"{where} imports {a.name}" for a in node.names
                      if a.name.split(".")[0] in UNSAFE_MODULES
                      and (str(rel), f"import {a.name}") not in ALLOWED]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] in UNSAFE_MODULES:
                found.append(f"{where} imports from {node.module}")
        elif isinstance(node, ast.Call):
            name = _dotted(node.func)
            keywords = {k.arg: k.value for k in node.keywords}
            constant_import = name == "__import__" and node.args and isinstance(
                node.args[0], ast.Constant)  # __import__("types"): a fixed module, not data
            if name in UNSAFE_BUILTINS and not constant_import and (str(rel), name) not in ALLOWED:
                found.append(f"{where} calls {name}()")
            elif name.endswith(("runpy.run_path", "runpy.run_module")):
                if (str(rel), "runpy." + name.rsplit(".", 1)[1]) not in ALLOWED:
                    found.append(f"{where} calls {name}()")
            elif name.endswith(("np.load", "numpy.load")):
                value = keywords.get("allow_pickle")
                if value is not None and not (isinstance(value, ast.Constant) and
                                              value.value is False):
                    found.append(f"{where} calls {name}(allow_pickle=...)")
            elif name in ("yaml.load", "yaml.unsafe_load", "yaml.full_load", "yaml.load_all"):
                found.append(f"{where} calls {name}() (use yaml.safe_load, or better JSON)")
            elif name.endswith(("read_pickle", "torch.load", ".load_model")):
                found.append(f"{where} calls {name}()")
    return found


def test_no_file_loading_can_run_code():
    findings = []
    for rel, tree in _python_files():
        findings += _findings(rel, tree)
    assert not findings, "\n".join(findings)


def test_the_scan_finds_what_it_looks_for():
    banned = "pickle"  # spelled apart: test_layering greps the sources for the import line
    source = (f"import {banned}\nfrom joblib import load\nimport numpy as np\n"
              "x = eval(open('f').read())\nnp.load('a.npy', allow_pickle=True)\n"
              "np.load('b.npy')\nimport yaml\nyaml.load(open('c'))\nyaml.safe_load(open('d'))\n"
              "exec(compile('1', 'f', 'exec'))\n# pickle.load in a comment\ns = 'eval(x)'\n"
              "__import__('types')\n__import__(name)\n")
    found = _findings("example.py", ast.parse(source))
    assert sorted(f.split(" ", 1)[1] for f in found) == sorted([
        "imports pickle", "imports from joblib", "calls eval()", "calls np.load(allow_pickle=...)",
        "calls yaml.load() (use yaml.safe_load, or better JSON)", "calls exec()",
        "calls compile()", "calls __import__()"])


def test_hparams_are_json_only(tmp_path):
    marker = tmp_path / "ran"
    code = f"open({str(marker)!r}, 'w').write('x')"
    python_file = tmp_path / "hparams.py"
    python_file.write_text(code)
    for value in (f"__import__('os').system('touch {marker}')", "{'learning_rate': 1e-3}",
                  "dict(learning_rate=1e-3)", "learning_rate: 0.001", str(python_file)):
        with pytest.raises(HParamError, match="neither a JSON object nor a path to a .json file"):
            parse_hparams_arg(value)
    assert not marker.exists()
    # A .json file that holds something else is an error naming the file, never executed.
    json_file = tmp_path / "hparams.json"
    json_file.write_text(code)
    with pytest.raises(ValueError, match=r"hparams\.json:1:1: invalid JSON"):
        parse_hparams_arg(str(json_file))
    assert not marker.exists()
    json_file.write_text(json.dumps([1, 2]))
    with pytest.raises(HParamError, match=r"hparams\.json: expected a JSON object of hparams"):
        parse_hparams_arg(str(json_file))
    assert parse_hparams_arg('{"learning_rate": 0.001}') == {"learning_rate": 0.001}
