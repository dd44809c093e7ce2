"""The suite's own rules: the named integration runs exist under the names conftest gives."""
import ast

from conftest import REPO_ROOT, SLOW_RUNS


def test_every_named_slow_run_is_a_test_of_its_module():
    for test_id in sorted(SLOW_RUNS):
        module, name = test_id.split("::")
        tree = ast.parse((REPO_ROOT / "tests" / module).read_text(encoding="utf-8"))
        functions = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
        assert name in functions, f"{test_id}: no such test (renamed? update SLOW_RUNS)"
