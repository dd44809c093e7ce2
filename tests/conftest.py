"""Shared pytest fixtures.

Integration tests read the real data in ../shared/data (next to the checkout). They skip when it is
absent, unless ELECTRA_REQUIRE_SHARED_DATA=1 (set by .ci/run), in which case they fail.
"""
import os
import pathlib

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
SHARED_DATA = pathlib.Path(
    os.environ.get("ELECTRA_SHARED_DATA", REPO_ROOT.parent / "shared" / "data"))


@pytest.fixture(scope="session")
def shared_data() -> pathlib.Path:
    """Path of ../shared/data; skips (or fails in CI) when it is not there."""
    if not (SHARED_DATA / "README.md").exists():
        message = f"shared data not found at {SHARED_DATA}"
        if os.environ.get("ELECTRA_REQUIRE_SHARED_DATA") == "1":
            pytest.fail(message + " (ELECTRA_REQUIRE_SHARED_DATA=1)")
        pytest.skip(message)
    return SHARED_DATA


@pytest.fixture
def instances_of(monkeypatch):
    """instances_of(cls) -> a list that every instance of `cls` made afterwards in the test is
    appended to (e.g. to read the trace counts of the tf.functions a run built)."""
    def record(cls) -> list:
        made, real_init = [], cls.__init__

        def init(self, *args, **kwargs):
            made.append(self)
            real_init(self, *args, **kwargs)

        monkeypatch.setattr(cls, "__init__", init)
        return made
    return record
