"""Documentation that is generated or promised stays true.

Besides the generated hparams reference, the user docs' mechanical claims are checked the way
GitHub renders them: tables keep their columns, links and anchors resolve, cited paths, sections
and command-line flags exist. Each check lists every failure as file:line, so one run shows all
that needs fixing. Everything is read with `re` and `ast`: nothing here imports TensorFlow.
"""
import ast
import fnmatch
import functools
import importlib.util
import re
import shlex
import urllib.parse
from typing import NamedTuple

from conftest import REPO_ROOT

USER_DOCS = sorted(
    [REPO_ROOT / name for name in
     ("README.md", "CONTRIBUTING.md", "BENCHMARKS.md", "EXPERIMENTS.md", "RELIABILITY.md")]
    + list((REPO_ROOT / "docs").glob("*.md")))

# A backticked token starting with one of these is a path in the repository.
REPO_DIRS = ("benchmarks", "experiments", "tools", "tests", "model", "pretrain", "finetune",
             "util", "docs")


def load_tool(name):
    spec = importlib.util.spec_from_file_location(name, REPO_ROOT / "tools" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def where(path, line: int) -> str:
    return f"{path.relative_to(REPO_ROOT)}:{line}"


def report(failures: list[str]) -> None:
    assert not failures, f"{len(failures)} failure(s):\n" + "\n".join(failures)


# ---------------------------------------------------------------------------------------------
# Reading Markdown as GitHub does, as far as these checks need.

class CodeBlock(NamedTuple):
    line: int  # 1-based line of its first content line
    info: str  # a fence's info string ("bash"); "" for an indented block
    lines: list[str]


class Doc(NamedTuple):
    path: object
    lines: list[str]
    prose: str  # the text with code block lines blanked, so offsets still give line numbers
    prose_kinds: list[bool]  # per line: True where the line is prose (not in a code block)
    blocks: list[CodeBlock]


FENCE = re.compile(r"^\s*(`{3,}|~{3,})\s*([^`\s]*)")
LIST_ITEM = re.compile(r"^(\s*)([-*+]|\d+[.)])(\s+)")


def split_code_blocks(lines: list[str]) -> tuple[list[bool], list[CodeBlock]]:
    """Which lines are prose, and the fenced and indented code blocks.

    An indented block starts after a blank line, 4 spaces deeper than the enclosing list item's
    content (a list item's continuation paragraphs are indented too)."""
    prose, blocks = [True] * len(lines), []
    fence, indented = "", False  # the open fence (backticks or tildes); in an indented block
    content_col, previous_blank = 0, True
    for i, line in enumerate(lines):
        blank, indent = not line.strip(), len(line) - len(line.lstrip(" "))
        opening = FENCE.match(line)
        if fence:
            prose[i] = False
            if re.fullmatch(rf"\s*{fence[0]}{{{len(fence)},}}\s*", line):
                fence = ""
            else:
                blocks[-1].lines.append(line)
        elif opening:
            fence, indented, prose[i] = opening.group(1), False, False
            blocks.append(CodeBlock(i + 2, opening.group(2), []))
        elif indented and blank:
            prose[i] = False
            blocks[-1].lines.append("")
        elif not blank and indent >= content_col + 4 and (previous_blank or indented):
            if not indented:
                blocks.append(CodeBlock(i + 1, "", []))
            indented, prose[i] = True, False
            blocks[-1].lines.append(line[content_col + 4:])
        else:
            indented = False
            item = LIST_ITEM.match(line)
            if item:
                content_col = len(item.group(0))
            elif not blank and indent == 0 and previous_blank:
                content_col = 0  # a paragraph at the margin ends the list
        previous_blank = blank
    return prose, blocks


@functools.lru_cache(maxsize=None)
def read_doc(path) -> Doc:
    lines = path.read_text(encoding="utf-8").split("\n")
    prose, blocks = split_code_blocks(lines)
    text = "\n".join(line if keep else "" for line, keep in zip(lines, prose))
    return Doc(path, lines, text, prose, blocks)


def line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def code_spans(text: str):
    """(start, end, content) of each inline code span: a run of n backticks up to the next run of
    exactly n within the same paragraph (CommonMark), content with line breaks as spaces."""
    for paragraph in re.finditer(r"(?:[^\n]+\n?)+", text):
        body, start, i = paragraph.group(0), paragraph.start(), 0
        while i < len(body):
            if body[i] == "\\":
                i += 2
                continue
            if body[i] != "`":
                i += 1
                continue
            n = len(re.match(r"`+", body[i:]).group(0))
            closing = re.compile(rf"(?<!`)`{{{n}}}(?!`)").search(body, i + n)
            if not closing:
                i += n  # an unmatched run is literal text
                continue
            content = body[i + n:closing.start()].replace("\n", " ").strip()
            yield start + i, start + closing.end(), content
            i = closing.end()


def without_code_spans(text: str) -> str:
    """The text with code spans blanked (same length): a `[x](y)` in code is not a link."""
    chars = list(text)
    for start, end, _ in code_spans(text):
        for j in range(start, end):
            if chars[j] != "\n":
                chars[j] = " "
    return "".join(chars)


HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$")


def heading_text(markdown: str) -> str:
    """A heading's rendered text: code spans without backticks, links as their text, no
    emphasis markers or HTML tags."""
    parts = markdown.split("`")
    for i in range(0, len(parts), 2):  # the even parts are outside code spans
        part = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", parts[i])
        part = re.sub(r"<[^>]+>", "", part)
        part = re.sub(r"(?<!\w)_(.+?)_(?!\w)", r"\1", part.replace("*", ""))
        parts[i] = part
    return "".join(parts).strip()


def headings(path) -> list[tuple[int, str]]:
    """(line, rendered text) of each ATX heading outside code blocks."""
    doc = read_doc(path)
    found = []
    for i, (line, prose) in enumerate(zip(doc.lines, doc.prose_kinds)):
        match = HEADING.match(line) if prose else None
        if match:
            found.append((i + 1, heading_text(match.group(2))))
    return found


def slug(text: str) -> str:
    """GitHub's anchor of a heading: lowercase, punctuation but `-` and `_` removed, spaces to
    `-`."""
    return re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")


@functools.lru_cache(maxsize=None)
def anchors(path) -> frozenset[str]:
    """Every heading's anchor; a repeated heading gets -1, -2, ... as on GitHub."""
    seen: dict[str, int] = {}
    result = set()
    for _, text in headings(path):
        base = slug(text)
        anchor = f"{base}-{seen[base]}" if base in seen else base
        seen[base] = seen.get(base, 0) + 1
        result.add(anchor)
    return frozenset(result)


def inside_repo(path) -> bool:
    return path.resolve().is_relative_to(REPO_ROOT.resolve())


# ---------------------------------------------------------------------------------------------
# (a) Tables: GitHub splits a row on every unescaped `|`, inside code spans too.

DELIMITER_ROW = re.compile(r"^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$")


def cell_count(row: str) -> int:
    """Cells of a table row: unescaped pipes split it; a leading and a trailing pipe are
    borders."""
    row = row.strip()
    pipes, i = [], 0
    while i < len(row):
        if row[i] == "\\":
            i += 2
            continue
        if row[i] == "|":
            pipes.append(i)
        i += 1
    count = len(pipes) + 1
    if pipes and pipes[0] == 0:
        count -= 1
    if pipes and pipes[-1] == len(row) - 1 and len(row) > 1:
        count -= 1
    return count


def table_failures(path) -> list[str]:
    doc = read_doc(path)
    lines, prose = doc.lines, doc.prose_kinds
    failures, end_of_table = [], 0
    for i in range(1, len(lines)):
        if i < end_of_table or not (prose[i] and prose[i - 1] and "|" in lines[i]
                                    and DELIMITER_ROW.match(lines[i])):
            continue
        header, columns = cell_count(lines[i - 1]), cell_count(lines[i])
        if header != columns:
            failures.append(f"{where(path, i)}: table header has {header} cells but its "
                            f"delimiter row {columns}: GitHub does not render it as a table")
            continue
        j = i + 1
        while j < len(lines) and prose[j] and lines[j].strip() and not HEADING.match(lines[j]):
            cells = cell_count(lines[j])
            if cells != header:
                hint = ("a line right after a table is one of its rows: leave a blank line"
                        if "|" not in lines[j] else "escape a `|` inside a cell as `\\|`")
                failures.append(f"{where(path, j + 1)}: table row has {cells} cells, its header "
                                f"{header} ({hint})")
            j += 1
        end_of_table = j
    return failures


def test_every_table_row_has_as_many_cells_as_its_header():
    report([failure for path in USER_DOCS for failure in table_failures(path)])


def test_cell_count_splits_as_github_does():
    assert cell_count("| a | `str | None` | c |") == 4
    assert cell_count("| a | `str \\| None` | c |") == 3
    assert cell_count("a | b") == 2
    assert cell_count("| a \\\\| b |") == 2  # an escaped backslash does not escape the pipe


def test_generated_hparams_tables_render_with_five_cells_a_row():
    doc = read_doc(REPO_ROOT / "docs" / "HPARAMS.md")
    rows = [line for line in doc.lines if line.startswith("|")]
    assert len(rows) > 100
    assert {cell_count(row) for row in rows} == {5}
    assert table_failures(REPO_ROOT / "docs" / "HPARAMS.md") == []


# ---------------------------------------------------------------------------------------------
# (b) and (c) Links and anchors resolve, and nothing points outside the repository.

LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
# Paths of one machine's layout: they do not exist on a reader's machine.
MACHINE_PATH = re.compile(r"(?<![\w.~/:-])/(?:work|home|root|Users|mnt|scratch)/")


def links(path) -> list[tuple[int, str]]:
    """(line, target) of each inline link or image outside code."""
    text = without_code_spans(read_doc(path).prose)
    return [(line_of(text, m.start()), m.group(1)) for m in LINK.finditer(text)]


def link_failure(path, target: str) -> str | None:
    if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target):
        return None  # http(s), mailto: not a file of the repository
    file_part, _, anchor = target.partition("#")
    resolved = (path.parent / urllib.parse.unquote(file_part)) if file_part else path
    if not inside_repo(resolved):
        return None  # the outside-the-repository check reports it
    if not resolved.exists():
        return f"link target {target!r} does not exist"
    if anchor and resolved.suffix == ".md" and anchor.lower() not in anchors(resolved):
        return (f"link {target!r}: no heading of {resolved.relative_to(REPO_ROOT)} has the "
                f"anchor #{anchor}")
    return None


def test_every_relative_link_and_anchor_resolves():
    failures = []
    for path in USER_DOCS:
        for line, target in links(path):
            failure = link_failure(path, target)
            if failure:
                failures.append(f"{where(path, line)}: {failure}")
    report(failures)


def test_no_doc_points_outside_the_repository():
    failures = []
    for path in USER_DOCS:
        for i, line in enumerate(read_doc(path).lines):
            if "../shared" in line:
                failures.append(f"{where(path, i + 1)}: points at ../shared (outside the "
                                "repository): name the data directory instead")
            for match in MACHINE_PATH.finditer(line):
                failures.append(f"{where(path, i + 1)}: absolute path of one machine "
                                f"({line[match.start():match.start() + 30]!r}...)")
        for line, target in links(path):
            file_part = urllib.parse.unquote(target.partition("#")[0])
            if file_part and ":" not in file_part and not inside_repo(path.parent / file_part):
                failures.append(f"{where(path, line)}: link {target!r} leaves the repository")
    report(failures)


def test_anchors_number_repeated_headings_and_skip_code(tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text("# Setup\n\n```bash\n# Not a heading\n```\n\n    # nor this\n\n"
                   "## Setup\n### Setup ###\n", encoding="utf-8")
    assert anchors(doc) == {"setup", "setup-1", "setup-2"}


def test_anchors_follow_githubs_slugs():
    assert slug(heading_text("Pre-training (`run_pretraining.py --hparams`)")) == (
        "pre-training-run_pretrainingpy---hparams")
    assert slug(heading_text("Cloud storage: gs://, s3://, hdfs://")) == "cloud-storage-gs-s3-hdfs"
    assert slug(heading_text("1. ELECTRA vs BERT [at](x.md) *equal*")) == (
        "1-electra-vs-bert-at-equal")


# ---------------------------------------------------------------------------------------------
# (d) Repository paths cited in backticks exist.

PLACEHOLDER = re.compile(r"[<*${]|\.\.\.")


@functools.lru_cache(maxsize=None)
def module_tree(path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def defined_names(body) -> set[str]:
    """Names a module or class body defines: functions, classes, assignments, imports."""
    names = set()
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.If, ast.Try)):
            names |= defined_names(node.body)
    return names


def symbol_failure(path, symbol: str) -> str | None:
    """Checks `Name` or `Class.attr` in a Python file; deeper chains only by their first part."""
    parts = [p for p in re.split(r"[.:]+", symbol) if p]
    if not parts or not re.fullmatch(r"\w+", parts[0]):
        return None
    body = module_tree(path).body
    if parts[0] not in defined_names(body):
        return f"{path.relative_to(REPO_ROOT)} defines no {parts[0]!r}"
    classes = [n for n in body if isinstance(n, ast.ClassDef) and n.name == parts[0]]
    if len(parts) > 1 and classes and re.fullmatch(r"\w+", parts[1]):
        if parts[1] not in defined_names(classes[0].body):
            return f"{path.relative_to(REPO_ROOT)}: class {parts[0]} defines no {parts[1]!r}"
    return None


def module_file(dotted: list[str]):
    """(file, remaining parts) of the longest prefix of a dotted name that is a repo module."""
    for n in range(len(dotted), 0, -1):
        base = REPO_ROOT.joinpath(*dotted[:n])
        for candidate in (base.with_suffix(".py"), base / "__init__.py"):
            if candidate.is_file():
                return candidate, dotted[n:]
    return None, dotted


@functools.lru_cache(maxsize=None)
def unique_repo_file(name: str):
    """The one file of the repository's directories with this name (`test_checkpoint.py`), or
    None when there is none or more than one."""
    found = [p for d in REPO_DIRS for p in (REPO_ROOT / d).rglob(name) if p.is_file()]
    return found[0] if len(found) == 1 else None


def cited_path_failure(token: str) -> str | None:
    """What is wrong with a path-like token cited in backticks, or None (also for tokens that
    are not repository paths)."""
    token = token.strip("()[],;'\"").rstrip(".:").split("[")[0]  # no pytest parameter ids
    if not token or PLACEHOLDER.search(token):
        return None
    top = token.split("/")[0].split(".")[0]
    if "/" in token and token.split("/")[0] in REPO_DIRS:
        file_part, _, symbol = token.partition(":")
        path = REPO_ROOT / file_part
        module, dot, attribute = file_part.rpartition("/")[2].partition(".")
        for candidate in (path.parent / f"{module}.py", path.parent / module / "__init__.py"):
            if not path.exists() and dot and candidate.is_file():
                path, symbol = candidate, attribute  # `util/fs.relation`, `pretrain/objectives.x`
        if not path.exists():
            return f"`{token}`: {file_part} does not exist"
        failure = symbol_failure(path, symbol) if symbol and path.suffix == ".py" else None
        return f"`{token}`: {failure}" if failure else None
    if top in REPO_DIRS and re.fullmatch(r"\w+(\.\w+)+", token):
        path, rest = module_file(token.split("."))
        if path is None or len(token.split(".")) < 2 or path == REPO_ROOT / top / "__init__.py":
            return None  # not a module of the repository: `model.safetensors`, say
        failure = symbol_failure(path, ".".join(rest)) if rest else None
        return f"`{token}`: {failure}" if failure else None
    bare = re.fullmatch(r"([\w-]+\.(?:py|md))(?::+([\w.:]+))?", token)
    if bare:
        name, symbol = bare.groups()
        path = REPO_ROOT / name if (REPO_ROOT / name).is_file() else unique_repo_file(name)
        if path is None:
            # Maybe another project's file (the release's `pretrain_helpers.py`), but a pytest
            # node id (`test_x.py::test_y`) names one of ours.
            return f"`{token}`: no file {name} in the repository" if "::" in token else None
        failure = symbol_failure(path, symbol) if symbol and name.endswith(".py") else None
        return f"`{token}`: {failure}" if failure else None
    return None


def test_every_cited_repository_path_exists():
    failures = []
    for path in USER_DOCS:
        text = read_doc(path).prose
        for offset, _, content in code_spans(text):
            for token in content.split():
                failure = cited_path_failure(token)
                if failure:
                    failures.append(f"{where(path, line_of(text, offset))}: {failure}")
    report(failures)


def test_cited_path_extractor_is_conservative():
    assert cited_path_failure("tests/test_docs.py") is None
    assert cited_path_failure("tests/test_docs.py::test_cell_count_splits_as_github_does") is None
    assert cited_path_failure("tests/no_such_test.py").startswith("`tests/no_such_test.py`")
    assert cited_path_failure("tests/test_docs.py:no_such_function") is not None
    assert cited_path_failure("tools/gen_hparams_doc.py:render") is None
    assert cited_path_failure("util.task_spec.parse") is None
    assert cited_path_failure("util.task_spec.no_such_function") is not None
    assert cited_path_failure("model.safetensors") is None
    assert cited_path_failure("$DATA/models/<name>/") is None
    assert cited_path_failure("benchmarks/results/*.json") is None
    assert cited_path_failure("pretrain_helpers.py") is None  # the official release's file
    assert cited_path_failure("test_docs.py::test_cell_count_splits_as_github_does[x") is None
    assert cited_path_failure("test_docs.py::no_such_test") is not None
    assert cited_path_failure("test_no_such_file.py::test_x") is not None
    assert cited_path_failure("run_pretraining.py:no_such_function") is not None
    assert cited_path_failure("util/fs.relation") is None
    assert cited_path_failure("util/fs.no_such_function") is not None


# ---------------------------------------------------------------------------------------------
# (e) A section cited by name exists: `BENCHMARKS.md, "Speed levers"`.

CITED_SECTION = re.compile(
    r"(?P<doc>(?:[\w.-]+/)*[\w.-]+\.md)"  # a doc, maybe in backticks or a link
    r"(?:`|\]\([^)\s]*\))*[\s,:(]{0,4}"  # then a comma, colon or parenthesis
    r"[\"“](?P<title>[^\"”\n]{1,100})[\"”]")  # then the quoted section


def find_doc(name: str, citing):
    for candidate in (REPO_ROOT / name, citing.parent / name, REPO_ROOT / "docs" / name):
        if candidate.is_file():
            return candidate
    return None


def test_every_cited_section_exists():
    failures = []
    for path in USER_DOCS:
        text = read_doc(path).prose
        for match in CITED_SECTION.finditer(text):
            name, title = match.group("doc"), match.group("title")
            target, place = find_doc(name, path), where(path, line_of(text, match.start()))
            if target is None:
                failures.append(f"{place}: cites {name}, which does not exist")
            elif not any(title.lower() in heading.lower() for _, heading in headings(target)):
                failures.append(f"{place}: {name} has no section {title!r}")
    report(failures)


# ---------------------------------------------------------------------------------------------
# (f) Commands shown use only flags their scripts accept (read from the argparse calls).

@functools.lru_cache(maxsize=None)
def module_constants(path) -> dict[str, str]:
    """Module-level NAME = "string" assignments, for flags named by a constant."""
    constants = {}
    for node in module_tree(path).body:
        if not isinstance(node, ast.Assign):
            continue
        for target in node.targets:
            # NAME = "x", and A, B = "x", "y"
            pairs = ([(target, node.value)] if isinstance(target, ast.Name) else
                     zip(target.elts, node.value.elts)
                     if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple)
                     else [])
            for name, value in pairs:
                if (isinstance(name, ast.Name) and isinstance(value, ast.Constant)
                        and isinstance(value.value, str)):
                    constants[name.id] = value.value
    return constants


def string_value(node, names: dict[str, str]) -> str | None:
    """A string an expression surely has; unknown parts of an f-string become `*`."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name):
        return names.get(node.id)
    if isinstance(node, ast.JoinedStr):
        parts = [string_value(v.value if isinstance(v, ast.FormattedValue) else v, names)
                 for v in node.values]
        return "".join("*" if p is None else p for p in parts)
    return None


@functools.lru_cache(maxsize=None)
def imported_names(path) -> dict[str, tuple[object, str | None]]:
    """Local name -> (file, function or None for the module) of what the file imports from the
    repository: `import common` beside it, `from util import console`,
    `from experiments.common import parse_args`."""
    found = {}
    for node in ast.walk(module_tree(path)):
        if isinstance(node, ast.Import):
            pairs = [(a.asname or a.name, a.name.split(".")) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            pairs = [(a.asname or a.name, node.module.split(".") + [a.name]) for a in node.names]
        else:
            continue
        for local, dotted in pairs:
            for base in (REPO_ROOT, path.parent):
                if base.joinpath(*dotted).with_suffix(".py").is_file():
                    found[local] = (base.joinpath(*dotted).with_suffix(".py"), None)
                elif len(dotted) > 1 and base.joinpath(*dotted[:-1]).with_suffix(".py").is_file():
                    found[local] = (base.joinpath(*dotted[:-1]).with_suffix(".py"), dotted[-1])
                else:
                    continue
                break
    return found


def function_in(path, name: str):
    for node in module_tree(path).body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return node
    return None


def called_helper(call: ast.Call, path):
    """(file, function definition) of a call into the repository: `module.function(...)`, an
    imported function or one of the file's own functions."""
    func, imports = call.func, imported_names(path)
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        target, attribute = imports.get(func.value.id, (None, None))
        name = func.attr if target and attribute is None else None
    elif isinstance(func, ast.Name):
        target, name = imports.get(func.id, (path, func.id))
    else:
        return None
    definition = function_in(target, name) if name else None
    return (target, definition) if definition else None


def bound_arguments(call: ast.Call, definition: ast.FunctionDef,
                    names: dict[str, str]) -> dict[str, str]:
    """The helper's string parameters as this call binds them (else their defaults)."""
    params = definition.args.args
    bound = {}
    for param, default in zip(params[len(params) - len(definition.args.defaults):],
                              definition.args.defaults):
        bound[param.arg] = string_value(default, {})
    for param, value in zip(params, call.args):
        bound[param.arg] = string_value(value, names)
    for keyword in call.keywords:
        if keyword.arg:
            bound[keyword.arg] = string_value(keyword.value, names)
    return {k: v for k, v in bound.items() if v is not None}


def collect_flags(node, path, names: dict[str, str]) -> frozenset[str]:
    """Flags of every `add_argument` under node, and of the functions it calls in the repository
    that add some (their parameters bound from the call): argparse helpers such as
    `common.add_round_args(parser, unit="calls")`."""
    flags = set()
    for call in (n for n in ast.walk(node) if isinstance(n, ast.Call)):
        if isinstance(call.func, ast.Attribute) and call.func.attr == "add_argument":
            values = (string_value(arg, names) for arg in call.args)
            flags.update(v for v in values if v and v.startswith("-"))
            continue
        helper = called_helper(call, path)
        if helper:
            target, definition = helper
            bound = bound_arguments(call, definition, names)
            flags |= function_flags(target, definition.name, tuple(sorted(bound.items())))
    return frozenset(flags)


_FUNCTION_FLAGS: dict[tuple, frozenset[str]] = {}
_RUNNING: set[tuple] = set()


def function_flags(path, name: str, bound: tuple) -> frozenset[str]:
    """collect_flags of one function, computed once per binding; a function that is already
    being read (a recursive call) adds nothing more."""
    key = (path, name, bound)
    if key not in _FUNCTION_FLAGS:
        if (path, name) in _RUNNING:
            return frozenset()
        _RUNNING.add((path, name))
        try:
            names = {**module_constants(path), **dict(bound)}
            _FUNCTION_FLAGS[key] = collect_flags(function_in(path, name), path, names)
        finally:
            _RUNNING.discard((path, name))
    return _FUNCTION_FLAGS[key]


@functools.lru_cache(maxsize=None)
def script_flags(path) -> frozenset[str]:
    return collect_flags(module_tree(path), path, module_constants(path)) | {"-h", "--help"}


def accepts(flags: frozenset[str], flag: str) -> bool:
    return any(fnmatch.fnmatchcase(flag, pattern) for pattern in flags)


SEPARATORS = set(";&|()<>")
PREFIX_WORDS = {"until", "while", "if", "then", "do", "else", "time", "!", "exec", "nohup", "env",
                "{"}


def logical_lines(text: str):
    """(first line index, text) of each shell line: `\\` at a line's end continues it, and so
    does an open quote."""
    lines, i = text.split("\n"), 0
    while i < len(lines):
        start, current = i, lines[i]
        while True:
            if current.endswith("\\") and i + 1 < len(lines):
                i += 1
                current = current[:-1] + " " + lines[i]
                continue
            try:
                shell_words(current)
            except ValueError:
                if i + 1 < len(lines):
                    i += 1
                    current = current + "\n" + lines[i]
                    continue
            break
        yield start, current
        i += 1


def shell_words(line: str) -> list[str]:
    lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|()<>")
    lexer.whitespace_split = True
    return list(lexer)


def simple_commands(words: list[str]):
    """The words of each simple command (split at ; && || | & and parentheses)."""
    command = []
    for word in words:
        if set(word) <= SEPARATORS:
            yield command
            command = []
        else:
            command.append(word)
    yield command


def script_and_args(words: list[str]):
    """(script path as written, its arguments) when a command runs a repository script with
    python (or directly), else None."""
    while words and (words[0] in PREFIX_WORDS or re.match(r"^\w+=", words[0])):
        words = words[1:]
    if words and re.search(r"(^|/)python(3(\.\d+)?)?$", words[0]):
        words = words[1:]
        while words and words[0].startswith("-") and words[0] != "-m":
            words = words[1:]  # interpreter options (-u, -X ...)
        if words[:1] == ["-m"] and len(words) > 1:
            path, rest = module_file(words[1].split("."))
            return (str(path.relative_to(REPO_ROOT)), words[2:]) if path and not rest else None
    if words and words[0].endswith(".py") and not PLACEHOLDER.search(words[0]):
        return words[0], words[1:]
    return None


def flag_names(args: list[str]) -> list[str]:
    names = []
    for arg in args:
        if arg == "--":
            break
        if re.match(r"^(--[A-Za-z0-9][\w-]*|-[A-Za-z])(=|$)", arg) and not PLACEHOLDER.search(arg):
            names.append(arg.split("=")[0])
    return names


def command_failures(command_text: str) -> list[tuple[int, str]]:
    """(line offset, failure) for each repository script the shell text runs with a flag it
    does not accept, or runs but does not exist."""
    failures = []
    for offset, line in logical_lines(command_text):
        try:
            words = shell_words(line)
        except ValueError as error:
            failures.append((offset, f"not a shell command ({error}): {line.strip()[:60]}"))
            continue
        for command in simple_commands(words):
            found = script_and_args(command)
            if not found:
                continue
            script, args = found
            path = REPO_ROOT / script
            if not (path.is_file() and inside_repo(path)):
                failures.append((offset, f"script {script} does not exist"))
                continue
            for flag in flag_names(args):
                if not accepts(script_flags(path), flag):
                    failures.append((offset, f"{script} has no flag {flag}"))
    return failures


SHELL_INFOS = {"", "bash", "sh", "shell", "console"}


def shown_commands(path):
    """(line, shell text) of each shell code block and of each inline code span that runs a
    script (`python x.py ...`, `tools/x.py --flag`)."""
    doc = read_doc(path)
    for block in doc.blocks:
        if block.info in SHELL_INFOS:
            yield block.line, "\n".join(block.lines)
    for offset, _, content in code_spans(doc.prose):
        if re.match(r"^(\S*python3?\s|[\w/]+\.py\s+-)", content):
            yield line_of(doc.prose, offset), content


def test_every_command_shown_uses_flags_its_script_accepts():
    failures = []
    for path in USER_DOCS:
        for line, text in shown_commands(path):
            for offset, failure in command_failures(text):
                failures.append(f"{where(path, line + offset)}: {failure}")
    report(failures)


def test_flags_are_read_from_argparse_and_its_helpers():
    inference = script_flags(REPO_ROOT / "benchmarks" / "inference_latency.py")
    assert {"--size", "--seq-len", "--calls", "--peer-configs", "--rounds"} <= inference
    assert "--verbose" in script_flags(REPO_ROOT / "run_pretraining.py")
    # model_dir.add_heads_flags adds HEADS_FLAG, GENERATOR_HEADS_FLAG = "--num-...", "--gen..."
    assert "--num-attention-heads" in script_flags(REPO_ROOT / "score_text.py")
    assert "--work-dir" in script_flags(REPO_ROOT / "experiments" / "exp1_electra_vs_bert.py")
    # exp2 calls common.run_experiment, which calls common's parse_args.
    assert "--work-dir" in script_flags(REPO_ROOT / "experiments" / "exp2_generator_size.py")


def test_commands_are_split_as_the_shell_splits_them():
    text = ("# a comment --nope\n"
            "python tools/gen_hparams_doc.py \\\n    --check   # trailing --comment\n"
            "X=1 python tools/gen_hparams_doc.py --check && python demo.py ... --work-dir $D\n"
            "echo '{\n  \"a\": 1}' | python tools/gen_hparams_doc.py --bogus\n"
            "until python tools/gen_hparams_doc.py --check; [ $? -ne 75 ]; do :; done\n"
            "python -m pytest -q tests/test_docs.py\n")
    assert command_failures(text) == [(4, "tools/gen_hparams_doc.py has no flag --bogus")]
    assert command_failures("python tools/no_such_tool.py --x") == [
        (0, "script tools/no_such_tool.py does not exist")]


# ---------------------------------------------------------------------------------------------
# Promises of particular docs.

def test_hparams_reference_is_generated_from_the_configs():
    gen = load_tool("gen_hparams_doc")
    current = (REPO_ROOT / "docs" / "HPARAMS.md").read_text(encoding="utf-8")
    assert current == gen.render(), "run: python tools/gen_hparams_doc.py"


def test_readme_opens_with_the_demo_and_the_ci_test_command():
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```bash\n(.*?)\n```", readme, flags=re.S)
    assert blocks[0].endswith("python demo.py")
    test_command = blocks[1]
    ci = (REPO_ROOT / ".ci" / "run").read_text(encoding="utf-8")
    # .ci/run runs exactly the README's test command, with ELECTRA_REQUIRE_SHARED_DATA=1.
    assert "export ELECTRA_REQUIRE_SHARED_DATA=1" in ci
    assert test_command in ci.splitlines()


def test_readme_links_point_at_files_that_exist():
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    for target in re.findall(r"\]\(([^)#]+)\)", readme):
        if not target.startswith("http"):
            assert (REPO_ROOT / target).exists(), target
