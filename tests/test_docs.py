"""Documentation that is generated or promised stays true."""
import importlib.util
import re

from conftest import REPO_ROOT


def load_tool(name):
    spec = importlib.util.spec_from_file_location(name, REPO_ROOT / "tools" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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
