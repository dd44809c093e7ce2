"""Shared pytest fixtures.

Integration tests read the real data in ../shared/data (next to the checkout). They skip when it is
absent, unless ELECTRA_REQUIRE_SHARED_DATA=1 (set by .ci/run), in which case they fail.
"""
import os
import pathlib

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session", autouse=True)
def graphs_run_as_the_commands_run():
    """In-process trainers run their graphs as the commands do (without Grappler's rewrites,
    Python's cycle collector run rarely), the same in every test whichever command a test ran
    before it in this worker."""
    from util import training_utils
    training_utils.run_as_the_commands_run()


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


# The named integration runs: each trains, kills or compiles for over 10 s, and nothing cheaper
# shows its point. They carry the `slow` marker, so that `pytest -m "not slow" tests` is the fast
# loop for edits; README's test command runs them all. A test id without brackets names every
# parametrization, a module name every test of the module. A new entry needs the reason it
# cannot be cheaper.
SLOW_RUNS = {
    # Runs that reach each health state on purpose (tests/test_health.py checks the rules).
    "test_health_runs.py",
    # A task defined by data against its built-in twin, each trained on the shared data.
    "test_custom_tasks.py::test_custom_qa_over_squad_files_is_the_builtin_squadv1",
    "test_custom_tasks.py::test_custom_tagging_with_the_chunk_column_is_the_builtin_chunk",
    "test_custom_tasks.py::test_custom_tagging_with_the_pos_column_learns_pos_tags",
    "test_custom_tasks.py::test_custom_classification_over_sst2_is_the_builtin_sst",
    "test_custom_tasks.py::test_custom_regression_over_sts_is_the_builtin_sts",
    "test_run_finetuning.py::test_end_to_end_on_sst_and_cola_slices",
    "test_xla.py::test_xla_resumes_exactly",
    "test_probing.py::test_pretraining_eval_reports_probes",
    "test_run_pretraining_integration.py::test_tiny_electra_learns_on_real_text",
    "test_run_pretraining_distributed.py::test_same_loss_curve_and_weights_as_one_device",
    "test_run_pretraining_distributed.py::test_only_the_chief_writes",
    "test_preemption.py::test_pretraining_sigterm_sigint_and_sigkill_mid_loop_then_resume_bit_for_bit",
    "test_preemption.py::test_multi_worker_one_worker_signalled_all_stop_at_the_same_step",
    "test_preemption.py::test_finetuning_trial_sigterm_saves_and_resumes_bit_for_bit",
    "test_preemption.py::test_finetuning_signal_after_a_trial_stops_before_the_next",
    "test_reliability_kill.py::test_pretraining_killed_then_signalled_inside_saves_resumes_exactly",
    "test_reliability_kill.py::test_finetuning_killed_before_the_state_file_update_resumes_exactly",
    "test_reliability_faults.py::test_full_disk_mid_run_is_a_clear_error_and_keeps_the_checkpoints",
    "test_fingerprints.py::test_pretraining_objective_computes_what_it_did",
    "test_fingerprints.py::test_finetuning_family_computes_what_it_did",
    "test_recompute_grad.py::test_electric_trains_with_recompute_and_reports_discriminator_metrics",
    "test_recompute_grad.py::test_accumulation_with_recompute_matches_the_plain_full_batch_step",
    "test_demo.py::test_demo_path_runs_and_writes_its_outputs",
    "test_reference_step.py::test_electra_step_matches_the_official_formulas_through_warmup",
    "test_reference_step.py::test_electra_step_in_bfloat16_and_under_xla",
    "test_reference_step.py::test_electra_step_with_bias_corrected_adam",
    "test_probing.py::test_probe_tool_on_a_tiny_wordpiece_model",
    "test_probing.py::test_probes_on_the_shared_conll_and_sst_files",
    "test_xla.py::test_xla_pretraining_computes_what_graph_mode_computes",
    "test_xla.py::test_xla_finetuning_computes_what_graph_mode_computes",
    "test_xla.py::test_xla_pretraining_in_float16_scales_the_loss",
    "test_xla.py::test_xla_pretraining_in_bfloat16_tracks_float32",
    "test_qa_end_to_end.py::test_squad_v1_and_v2_end_to_end",
    "test_cloud_storage.py::test_every_command_on_ram",
    "test_tagging.py::test_end_to_end_on_a_slice_of_the_shared_training_file",
    "test_run_finetuning.py::test_halted_trial_resumes_to_the_same_weights",
    # Two trials trained and evaluated, cut and full: the equality of whole runs.
    "test_bucketing.py::test_training_and_predictions_equal_full_padding",
    # Over 10 s on the float32 hosts (tracing several trainers, float16 emulated on the CPU,
    # worker processes that each import TensorFlow); the fast loop keeps cheaper tests of the
    # same modules (float16 skips and accumulation in test_step_engine.py):
    # three trials on two tasks, a fresh model against the reused one, then a re-run;
    "test_run_finetuning.py::test_trials_median_and_finished_trials_are_reused",
    # a run thrown to NaN by a learning rate of 1e30, from a copy of the module's run;
    "test_reliability_faults.py::test_nan_loss_stops_the_run_with_the_step_and_keeps_the_last_good_checkpoint",
    # float16 loss scaling: overflowing steps skipped until the scale fits;
    "test_run_pretraining.py::test_float16_uses_dynamic_loss_scaling_and_skips_overflows",
    # one step of the full batch against four accumulated micro-batches, two trainers;
    "test_run_pretraining.py::test_gradient_accumulation_matches_the_full_batch",
    # a build by two worker processes reading and writing file:// URLs.
    "test_build_pretraining_dataset.py::test_worker_processes_read_and_write_through_urls",
}


# Module fixtures that only write a little data: cheaper to build once per worker than to tie
# every test reading them to one worker.
CHEAP_MODULE_FIXTURES = {"data_dir", "repetitive_data", "real_text_data"}


def _module_fixtures(item) -> set:
    """The names of the module-, class- or package-scoped fixtures a test reads (directly or
    through other fixtures), leaving out the cheap ones."""
    return {name for name, defs in item._fixtureinfo.name2fixturedefs.items()
            if defs[-1].scope in ("module", "class", "package")
            and name not in CHEAP_MODULE_FIXTURES}


def _run_groups(items) -> dict:
    """Test -> its xdist group: the tests of a module that share a module-scoped run, joined
    through any fixture they have in common (so the run is built once), and no more: two runs of
    one module that no test reads together go to separate groups, which two workers can take."""
    parent = {}

    def root(key):
        while parent.setdefault(key, key) != key:
            key = parent[key]
        return key

    fixtures = {item: _module_fixtures(item) for item in items}
    for item, names in fixtures.items():
        keys = [(item.module.__name__, name) for name in sorted(names)]
        for key in keys[1:]:
            parent[root(key)] = root(keys[0])
    groups = {}
    for item, names in fixtures.items():
        if names:
            module, name = root((item.module.__name__, min(names)))
            groups[item] = f"{module}:{name}"
    return groups


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's, which reads the groups marked here
def pytest_collection_modifyitems(config, items):
    """Marks the named integration runs `slow`; keeps the tests that share a module-scoped run
    on one worker of a parallel session (`-n 2`), so it is trained once; starts the modules
    holding long runs first, so that workers do not end on one long run."""
    for item in items:
        test_id = item.nodeid.split("tests/", 1)[-1].split("[", 1)[0]
        if test_id in SLOW_RUNS or test_id.split("::")[0] in SLOW_RUNS:
            item.add_marker(pytest.mark.slow)
    for item, group in _run_groups(items).items():
        item.add_marker(pytest.mark.xdist_group(group))
    slow_modules = {item.module.__name__ for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.module.__name__ not in slow_modules)  # stable: modules stay whole


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
