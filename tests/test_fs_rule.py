"""Files the commands read or write go through util/fs.py (so gs://, s3://, hdfs:// work): code
under util/, model/, pretrain/, finetune/ and the top-level scripts does not touch a path with
open, os, os.path's disk functions, shutil, glob, tempfile or filecmp, except the few local-only
places listed in ALLOWED with their reason.

`python tests/test_fs_rule.py [ROOT]` prints every direct call site it finds (the count the
issue asked for).
"""
import ast
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGES = ("util", "model", "pretrain", "finetune")
EXTRA_SCRIPTS = ("tools/probe.py", "tools/inspect_run.py")
RULE_MODULE = "util/fs.py"

# os.path functions that only transform strings and so work on URLs as well.
STRING_ONLY = {"join", "dirname", "basename", "split", "splitext", "isabs", "expanduser", "sep"}
OS_FILE_FUNCTIONS = {
    "makedirs", "mkdir", "remove", "unlink", "rename", "replace", "listdir", "scandir", "walk",
    "stat", "lstat", "rmdir", "removedirs", "link", "symlink", "utime", "chmod", "fdopen", "open",
    "getcwd", "chdir", "truncate"}
WHOLE_MODULES = {"shutil", "filecmp", "tempfile", "pathlib"}
MODULE_FUNCTIONS = {("glob", "glob"), ("glob", "iglob"), ("gzip", "open"), ("bz2", "open"),
                    ("lzma", "open"), ("tarfile", "open"), ("io", "open"), ("codecs", "open")}

# (file, enclosing function, call) -> why it stays on the local disk.
ALLOWED = {
    ("util/training_utils.py", "_process_start_time", "open"):
        "/proc: this host's process table, to tell a lock owner's pid from a reused one",
    ("util/io_utils.py", "_local_atomic_open", "os.fdopen"):
        "local branch of atomic_open: fsync then atomic rename, which only a local file has",
    ("util/io_utils.py", "_local_atomic_open", "tempfile.mkstemp"):
        "local branch of atomic_open (a URL takes the gfile branch)",
    ("util/file_modes.py", "*", "*"):
        "modes of local files and directories: only a local disk has them (callers pass local "
        "paths only; a URL keeps what its store gives), and /proc or a probe file shows the umask",
    ("util/training_utils.py", "RunLock._create_local", "open"):
        "local lock: exclusive create (hard link / O_EXCL), which object stores lack",
    ("util/training_utils.py", "RunLock._create_local", "os.link"):
        "local lock: exclusive create (hard link / O_EXCL), which object stores lack",
    ("util/training_utils.py", "RunLock._create_local", "os.open"):
        "local lock: exclusive create (hard link / O_EXCL), which object stores lack",
    ("util/training_utils.py", "RunLock._create_local", "os.fdopen"):
        "local lock: exclusive create (hard link / O_EXCL), which object stores lack",
    ("util/training_utils.py", "RunLock.heartbeat", "os.utime"):
        "local lock: refreshes the mtime (a URL lease is rewritten instead)",
    ("pretrain/builder/dataset_builder.py", "_train_spm", "tempfile.mkdtemp"):
        "SentencePiece's trainer writes only local files; the model is then copied to the "
        "output directory through util/fs",
    ("pretrain/builder/dataset_builder.py", "_train_spm", "shutil.rmtree"):
        "removes the SentencePiece trainer's local temporary directory",
    ("export_model.py", "_make_temp_dir", "tempfile.mkdtemp"):
        "local branch: a private temporary directory (a URL takes the gfile branch)",
    ("demo.py", "*", "*"):
        "the demo's own work directory, on the local disk by design (it prints host details "
        "and runs the commands as subprocesses on files it generates)",
    ("util/console.py", "_import_tensorflow_with_startup_lines_filtered", "tempfile.TemporaryFile"):
        "catches the process's own stderr while TensorFlow loads (not a user path)",
    ("predict.py", "_input_file", "tempfile.TemporaryDirectory"):
        "standard input copied to a private local temporary file (not a user path)",
    ("predict.py", "_input_file", "open"):
        "standard input copied to a private local temporary file (not a user path)",
    ("predict.py", "_input_file", "shutil.copyfileobj"):
        "standard input copied to a private local temporary file (not a user path)",
    ("finetune/qa/squad_official_eval.py", "main", "open"):
        "the official SQuAD 2.0 script's own command line, kept as released",
    ("finetune/qa/squad_official_eval_v1.py", "main", "open"):
        "the official SQuAD 1.1 script's own command line, kept as released",
    ("finetune/qa/mrqa_official_eval.py", "main", "open"):
        "the official MRQA script's own command line, kept as released",
    ("finetune/qa/mrqa_official_eval.py", "read_answers", "open"):
        "the official MRQA script's reader, called by its own command line only",
    ("finetune/qa/mrqa_official_eval.py", "read_answers", "gzip.open"):
        "the official MRQA script's reader, called by its own command line only",
    ("tools/probe.py", "<module>", "os.path.abspath"):
        "the script's own location, to find the repository (not a user path)",
    ("tools/inspect_run.py", "<module>", "os.path.abspath"):
        "the script's own location, to find the repository (not a user path)",
}


def sources(root: pathlib.Path) -> list[pathlib.Path]:
    files = sorted(root.glob("*.py")) + [root / p for p in EXTRA_SCRIPTS]
    for package in PACKAGES:
        files += sorted((root / package).rglob("*.py"))
    return [f for f in files if f.exists() and f.relative_to(root).as_posix() != RULE_MODULE]


def _dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else None
    return None


def _offending(node: ast.AST, call: ast.Call | None = None) -> str | None:
    """The name if `node` (a called function, or a function passed around) reaches the disk."""
    name = _dotted(node)
    if name is None:
        return None
    parts = name.split(".")
    if name == "open":
        return name
    if parts[:2] == ["os", "path"] and len(parts) == 3:
        return None if parts[2] in STRING_ONLY else name
    if parts[0] == "os" and len(parts) == 2 and parts[1] in OS_FILE_FUNCTIONS:
        return name
    if parts[0] in WHOLE_MODULES:
        return name
    if len(parts) == 2 and tuple(parts) in MODULE_FUNCTIONS:
        if name == "tarfile.open" and call and any(k.arg == "fileobj" for k in call.keywords):
            return None  # reads a stream util/fs opened
        return name
    return None


def call_sites(root: pathlib.Path = ROOT) -> list[tuple[str, int, str, str]]:
    """(file, line, enclosing function, call) for every direct file access outside fs.py."""
    found = []
    for path in sources(root):
        rel = path.relative_to(root).as_posix()
        tree = ast.parse(path.read_text(encoding="utf-8"))

        def visit(node, scope):
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    inner = child.name if scope == "<module>" else f"{scope}.{child.name}"
                    visit(child, inner)
                    continue
                if isinstance(child, ast.Call):
                    name = _offending(child.func, child)
                    if name:
                        found.append((rel, child.lineno, scope, name))
                    else:
                        visit(child.func, scope)
                    for arg in child.args + [k.value for k in child.keywords]:
                        visit_node(arg, scope)
                    continue
                visit_node(child, scope)

        def visit_node(node, scope):
            # A function referenced without a call (opener = gzip.open if ... else open).
            if isinstance(node, (ast.Name, ast.Attribute)) and not isinstance(
                    getattr(node, "ctx", None), ast.Store):
                name = _offending(node)
                if name:
                    found.append((rel, node.lineno, scope, name))
                    return
            if isinstance(node, ast.Call):
                visit(ast.Module(body=[ast.Expr(node)], type_ignores=[]), scope)
                return
            visit(node, scope)

        visit(tree, "<module>")
    return found


def _allowed(site) -> bool:
    rel, _, scope, name = site
    return ((rel, scope, name) in ALLOWED or (rel, "*", "*") in ALLOWED
            or (rel, scope.split(".")[-1], name) in ALLOWED)


def test_file_access_goes_through_util_fs():
    bad = [f"{rel}:{line} ({scope}) {name}" for rel, line, scope, name in call_sites()
           if not _allowed((rel, line, scope, name))]
    assert not bad, ("direct file access on a user path; use util/fs.py (or add a reasoned "
                     "entry to ALLOWED):\n" + "\n".join(bad))


def test_allow_list_has_no_dead_entries():
    sites = call_sites()
    for key in ALLOWED:
        rel, scope, name = key
        assert any(s[0] == rel and (scope == "*" or s[2] == scope or s[2].split(".")[-1] == scope)
                   and (name == "*" or s[3] == name) for s in sites), f"unused entry {key}"


if __name__ == "__main__":
    root = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT
    sites = call_sites(root)
    for site in sites:
        mark = "  [allowed]" if _allowed(site) else ""
        print(f"{site[0]}:{site[1]} ({site[2]}) {site[3]}{mark}")
    print(f"{len(sites)} direct call sites, {sum(not _allowed(s) for s in sites)} not allowed")
