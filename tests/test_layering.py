"""Imports point one way: util <- model <- pretrain/finetune <- top-level scripts."""
import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent
# A package may import only from the packages listed for it (besides itself and third parties).
# pretrain/ and finetune/ may read their own configure_*.py; configs resolve architectures
# through model/ (get_bert_config) and nothing else.
ALLOWED = {"util": {"util"}, "model": {"util", "model"},
           "pretrain": {"util", "model", "pretrain", "configure_pretraining"},
           "finetune": {"util", "model", "finetune", "configure_finetuning"},
           "configure_pretraining": {"util", "model"}, "configure_finetuning": {"util", "model"}}
TOP_LEVEL_SCRIPTS = {p.stem for p in ROOT.glob("*.py")}


def sources(package: str):
    path = ROOT / f"{package}.py"
    return [path] if path.exists() else list((ROOT / package).rglob("*.py"))


def imported_modules(path: pathlib.Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_dependencies_point_one_way():
    violations = []
    for package, allowed in ALLOWED.items():
        for path in sources(package):
            for name in imported_modules(path):
                if (name in ALLOWED or name in TOP_LEVEL_SCRIPTS) and name not in allowed:
                    violations.append(f"{path.relative_to(ROOT)} imports {name}")
    assert not violations, "\n".join(violations)


def test_offline_data_building_stays_apart_from_training():
    """pretrain/builder/ (corpus -> tfrecords) and the training code of pretrain/ meet only in the
    record schema, pretrain/pretrain_data.py."""
    def pretrain_imports(path):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        names = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("pretrain"):
                names.update(f"{node.module}.{a.name}" for a in node.names)
        return names

    builder = ROOT / "pretrain" / "builder"
    for path in builder.glob("*.py"):
        for name in pretrain_imports(path):
            assert name.startswith("pretrain.builder") or name == "pretrain.pretrain_data", \
                f"{path.relative_to(ROOT)} imports {name}"
    for path in (ROOT / "pretrain").glob("*.py"):
        allowed = {"pretrain.builder.tfrecord_writer"} if path.name == "pretrain_data.py" else set()
        for name in pretrain_imports(path):
            assert not name.startswith("pretrain.builder") or name in allowed, \
                f"{path.relative_to(ROOT)} imports {name}"


def test_no_keras_and_no_pickle():
    offenders = []
    for path in ROOT.rglob("*.py"):
        if any(part.startswith(".") for part in path.relative_to(ROOT).parts):
            continue
        source = path.read_text(encoding="utf-8")
        if path.name != "test_layering.py" and ("tf.keras" in source or "import keras" in source
                                                or "import pickle" in source):
            offenders.append(str(path.relative_to(ROOT)))
    assert not offenders, offenders


MAX_FUNCTION_LINES = 80


def long_functions(limit: int = MAX_FUNCTION_LINES) -> list[str]:
    """`path:line name (N lines)` for each function or method (nested ones too) longer than
    `limit` lines, from its `def` to its last line, in the repository's own Python files."""
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        if any(part.startswith(".") for part in path.relative_to(ROOT).parts):
            continue  # .venv, .git
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > limit:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} "
                                 f"({length} lines)")
    return found


def test_no_function_is_longer_than_80_lines():
    """A function that does not fit on a screen does more than one thing: split it."""
    offenders = long_functions()
    assert not offenders, "\n".join(offenders)
