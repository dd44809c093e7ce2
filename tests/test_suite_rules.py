"""The suite's own rules: the named integration runs exist under the names conftest gives."""
import ast

import pytest

from conftest import REPO_ROOT, SLOW_RUNS


def test_every_named_slow_run_is_a_test_of_its_module():
    for test_id in sorted(SLOW_RUNS):
        if "::" not in test_id:
            assert (REPO_ROOT / "tests" / test_id).exists(), test_id
            continue
        module, name = test_id.split("::")
        tree = ast.parse((REPO_ROOT / "tests" / module).read_text(encoding="utf-8"))
        functions = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
        assert name in functions, f"{test_id}: no such test (renamed? update SLOW_RUNS)"


@pytest.fixture(scope="module")
def shared_run():
    """Stands for a module-scoped run that several tests read."""
    return object()


def test_tests_sharing_a_module_run_are_kept_on_one_worker(request, shared_run):
    """conftest marks a test reading a module-scoped run with its xdist group, and under `-n 2
    --dist loadgroup` pytest-xdist keeps the group on one worker by suffixing the test's id.
    pytest 9.2 stopped that suffix taking effect (pytest-xdist issue 1386): every shared run
    was then built once per worker, silently; requirements.txt keeps pytest below 9.2."""
    group = request.node.get_closest_marker("xdist_group")
    assert group is not None and group.args == ("test_suite_rules:shared_run",)
    if getattr(request.config.option, "loadgroup", False):  # an xdist worker of loadgroup
        assert request.node.nodeid.endswith("@test_suite_rules:shared_run"), request.node.nodeid
