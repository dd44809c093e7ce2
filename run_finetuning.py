"""Fine-tunes a pre-trained ELECTRA discriminator on downstream tasks (GLUE, ...).

    python run_finetuning.py --data-dir D --model-name M \
        --hparams '{"model_size": "small", "task_names": ["sst"]}'

Task data comes from D/finetuning_data/<task>/ (GLUE download directory names such as SST-2 also
work), initial weights from D/models/M (or hparam init_checkpoint), the vocabulary from beside
them (D/models/M/vocab.txt, a release download's vocab.txt), else D/vocab.txt. Each of
`num_trials` trials (seed + trial - 1) trains in D/models/M/finetuning_models/<tasks>_model_<trial>/
and is evaluated on dev; per-trial and median results go to
D/models/M/results/<tasks>_results.{txt,json}. With write_test_outputs, GLUE submission TSVs of
the first n_writes_test trials go to D/models/M/test_predictions/trial_<t>/.
Re-running the same command continues halted trials and reuses finished ones while their inputs
are unchanged (a finished trial is re-evaluated when its dev data or scoring settings changed; a
trial on changed training data is refused). SIGTERM or Ctrl-C stops the running trial at the
next step boundary with a checkpoint at that step (an eval or featurization at its next batch)
and exits 75 (0 done, 2 bad input, 3 every trial diverged). Trials are independent: one that
diverges (a NaN or Inf loss or gradient, or NaN dev results) is recorded as diverged, without
results, and left out of the median; the next trial runs, and the exit status is 0 with a
warning unless every trial diverged.
"""
import argparse
import logging
import math
import os
from typing import Any

from util import console  # first: keeps TensorFlow's start-up lines off the console

import numpy as np
import tensorflow as tf

import configure_finetuning
from finetune import outputs
from finetune import preprocessing
from finetune import task as task_lib
from finetune import task_builder
from finetune import trainer
from finetune import trial_model
from util import checkpoint
from util import distribution
from util import fs
from util import io_utils
from util import out_of_memory
from util import place_locks
from util import preemption
from util import record_check
from util import resume
from util import training_utils
from util import write_errors

log = logging.getLogger("run_finetuning")

# Official TPUEstimator settings with no TF2 meaning (TPUStrategy uses every core it finds).
NO_EFFECT_HPARAMS = ("num_tpu_cores", "tpu_job_name")


# -- results ------------------------------------------------------------------------------------


def median_results(trials: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """{results name: {metric: median over trials}} over the trials that did not diverge
    (metrics missing from a trial are skipped)."""
    values: dict[str, dict[str, list[float]]] = {}
    for trial in trials:
        if trial.get("diverged"):  # no results: a NaN model's figures mean nothing
            continue
        for name, metrics in trial["results"].items():
            for metric, value in metrics.items():
                values.setdefault(name, {}).setdefault(metric, []).append(float(value))
    return {name: {m: float(np.median(v)) for m, v in metrics.items()}
            for name, metrics in values.items()}


def _line(results: dict[str, dict[str, float]]) -> str:
    # Sorted, so a first run and a rerun (results read back from JSON) print the same line.
    return "; ".join(f"{name}: " + " - ".join(f"{k}: {v:.2f}" for k, v in sorted(metrics.items()))
                     for name, metrics in sorted(results.items()))


def _collapse_note(trial: dict[str, Any]) -> str:
    return "".join(f" COLLAPSED ({name}: {why})" for name, why in
                   sorted(trial.get("collapsed", {}).items()))


def _trial_line(trial: dict[str, Any]) -> str:
    head = f"trial {trial['trial']} (seed {trial['seed']}, step {trial['global_step']}): "
    if trial.get("diverged"):
        return head + f"DIVERGED ({trial['diverged']})"
    return head + _line(trial["results"]) + _collapse_note(trial)


def _median_line(trials: list[dict[str, Any]], median: dict) -> str:
    counted = [t for t in trials if not t.get("diverged")]
    if not counted:
        return f"median: none (all {len(trials)} trial(s) diverged)"
    notes = [f"{len(trials) - len(counted)} diverged trial(s) left out"] * (
        len(counted) < len(trials))
    notes += [f"{sum(1 for t in counted if t.get('collapsed'))} collapsed trial(s) included"] * \
        any(t.get("collapsed") for t in counted)
    return f"median of {len(counted)}: {_line(median)}" + (
        f" ({'; '.join(notes)})" if notes else "")


def write_results(config: configure_finetuning.FinetuningConfig,
                  trials: list[dict[str, Any]]) -> dict[str, Any]:
    """Writes every trial's dev results and their median, as text and JSON (atomically)."""
    median = median_results(trials)
    # Collapsed trials (finetune/health.py) stay in the median, flagged; diverged ones are
    # left out of it (they have no results), counted.
    collapsed = [t for t in trials if t.get("collapsed")]
    diverged = [t for t in trials if t.get("diverged")]
    summary = {"model_name": config.model_name, "task_names": config.task_names,
               "num_trials": len(trials), "trials": trials, "median": median,
               "collapsed_trials": len(collapsed), "diverged_trials": len(diverged),
               "median_of": len(trials) - len(diverged)}
    io_utils.write_json(config.results_json, summary)
    lines = [f"model {config.model_name}, tasks {','.join(config.task_names)}: "
             f"{len(trials)} trial(s)"]
    lines += [_trial_line(t) for t in trials]
    lines.append(_median_line(trials, median))
    io_utils.write_text(config.results_txt, "\n".join(lines) + "\n")
    log.info("results written to %s and %s", config.results_txt, config.results_json)
    return summary


def trial_keys(config: configure_finetuning.FinetuningConfig, tasks, preprocessor
               ) -> dict[str, Any]:
    """What a finished trial's record depends on besides its settings: the training examples
    (file content, a custom task's columns, labels and range, vocabulary), and what its dev
    results and test outputs are computed from (those files and the scoring settings)."""
    def content(task, split):
        try:
            return preprocessor.content_key([task], split)
        except task_lib.TaskDataError as e:  # e.g. no test file: nothing written from it
            return f"unreadable: {e}"

    keys = {"train_data": preprocessor.cache_key(tasks, "train", True) if config.do_train
            else None}
    keys["eval_key"] = {
        "max_eval_examples": config.max_eval_examples, "debug": config.debug,
        "qa_na_threshold": config.qa_na_threshold, "n_best_size": config.n_best_size,
        "max_answer_length": config.max_answer_length,
        "custom_specs": {t.name: config.custom_tasks[t.name] for t in tasks
                         if t.name in config.custom_tasks},
        "data": {f"{t.name} {split}": content(t, split) for t in tasks
                 for split, _ in t.get_eval_splits()} if config.do_eval else None}
    keys["test_key"] = {f"{t.name} {split}": content(t, split) for t in tasks
                        for split in t.get_test_splits()} if config.write_test_outputs else None
    return keys


def load_finished_trial(config: configure_finetuning.FinetuningConfig, trial: int,
                        need_test_outputs: bool, keys: dict[str, Any]) -> dict[str, Any] | None:
    """The saved record of a trial that finished with the same settings and inputs, else None
    (logging what changed: the trial is then re-evaluated, or refused or retrained by
    trainer.ModelRunner.check_settings when it was trained on something else)."""
    path = os.path.join(trainer.trial_dir(config, trial), trainer.RESULTS_FILE)
    if not config.do_train or not fs.exists(path):
        return None
    record = io_utils.read_json(path)
    # A diverged trial is final too: re-running its seed on the same settings diverges again.
    if not record.get("train_steps") or (record.get("global_step", -1) < record["train_steps"]
                                         and not record.get("diverged")):
        return None
    compared = [("training settings", "training_settings",
                 trainer.without_eval_only_keys(trainer.training_settings(config))),
                ("training data", "train_data", keys["train_data"]),
                ("evaluation data or settings", "eval_key", keys["eval_key"])]
    if need_test_outputs:
        compared.append(("test data", "test_key", keys["test_key"]))
    for what, name, current in compared:
        saved = record.get(name)
        if name == "training_settings" and isinstance(saved, dict):
            saved = trainer.without_eval_only_keys(saved)
        changes = ([f"{name}: not recorded (an older version's record)"] if name not in record
                   else resume.key_changes(saved, current))
        if changes:
            log.info("trial %d finished before, but its %s changed (%s): not reusing its "
                     "results", trial, what, "; ".join(changes[:5]))
            return None
    if need_test_outputs and not record.get("test_outputs") and not record.get("diverged"):
        return None
    return record


def check_outputs_apart(config: configure_finetuning.FinetuningConfig,
                        data_files: list[str]) -> None:
    """Refuses outputs that would replace what the run reads, however each path is spelled: a
    results file that is a task file or the vocabulary, and a trial directory that is or holds
    init_checkpoint (the trial would resume from those checkpoints as its own, write over them,
    and delete them after the trial unless keep_all_models)."""
    config.check_outputs_apart(["results_txt", "results_json"], [
        ("hparam 'vocab_file'", config.vocab_file)] + [("task file", f) for f in data_files])
    if not config.init_checkpoint:
        return
    for trial in range(1, config.num_trials + 1):
        directory = trainer.trial_dir(config, trial)
        if fs.relation(directory, config.init_checkpoint) in ("same", "contains"):
            raise configure_finetuning.HParamError(
                f"trial {trial} would write to {directory} (hparam model_dir {config.model_dir} "
                f"+ _{trial}), which holds init_checkpoint {config.init_checkpoint}: the trial "
                "would resume from those weights as its own and overwrite or delete them. Set "
                "hparam model_dir to another place")


def _remove_checkpoints(directory: str) -> None:
    for path in fs.glob(os.path.join(fs.escape(directory), "model.ckpt-*")):
        fs.remove(path)


# -- the run ------------------------------------------------------------------------------------


def run_trial(config, tasks, preprocessor, trial, strategy, keys,
              models: trial_model.Cache | None = None) -> dict[str, Any] | None:
    """Trains (or resumes) and evaluates one trial; returns its record when do_eval. `models`
    hands the previous trial's traced model on (re-initialised) instead of tracing anew."""
    is_chief = distribution.is_chief(strategy)
    need_test = config.write_test_outputs and trial <= config.n_writes_test
    finished = load_finished_trial(config, trial, need_test, keys)
    if finished is not None:
        log.info("trial %d already finished (step %d); reusing its results", trial,
                 finished["global_step"])
        return finished
    runner = trainer.ModelRunner(config, tasks, preprocessor, trial, strategy, models)
    runner.initialize()
    diverged = _train(runner) if config.do_train else None
    if preemption.requested():  # trained and saved (a signal during the last steps)
        raise preemption.Preempted(f"stopped on a signal before trial {trial}'s eval; re-run "
                                   "the same command to evaluate it")
    if not (config.do_eval or diverged):
        _write_test_outputs(config, runner, need_test)
        return None
    record = {"trial": trial, "seed": runner.seed, "global_step": runner.global_step,
              "train_steps": runner.train_steps, "results": {},
              "training_settings": trainer.training_settings(config),
              "train_data": keys["train_data"], "eval_key": keys["eval_key"],
              "test_key": keys["test_key"], "test_outputs": [], "collapsed": {}}
    if diverged is None:
        results = runner.evaluate()
        diverged = _non_finite_results(results, runner)
        if diverged is None:
            record.update(results=results, collapsed=runner.collapsed)
            record["test_outputs"] = _write_test_outputs(config, runner, need_test)
    if diverged is not None:
        record["diverged"] = diverged
        log.warning("trial %d diverged: %s. It is recorded as diverged, without results%s",
                    trial, diverged, "; the next trial runs" if trial < config.num_trials else "")
    # Only a trained trial is recorded as finished (an eval-only run may see a halted one).
    if is_chief and config.do_train:
        io_utils.write_json(os.path.join(runner.model_dir, trainer.RESULTS_FILE), record)
    return record


def _train(runner: trainer.ModelRunner) -> str | None:
    """Trains the trial; what made it diverge (a NaN or Inf loss or gradient), else None: one
    trial's divergence does not stop the trials after it (each has its own seed)."""
    try:
        runner.train()
    except training_utils.NonFiniteError as e:
        return str(e)
    return None


def _non_finite_results(results: dict[str, dict[str, float]],
                        runner: trainer.ModelRunner) -> str | None:
    """A trial whose training ended finite can still hold weights that overflow (the last
    update is applied after the last check): its dev figures are then NaN or Inf."""
    bad = [f"{name} {metric}={value}" for name, metrics in sorted(results.items())
           for metric, value in sorted(metrics.items()) if not math.isfinite(value)]
    if not bad:
        return None
    return (f"non-finite dev results at step {runner.global_step} (trial {runner.trial}): "
            f"{', '.join(bad)}; its weights overflowed. Checkpoint: "
            f"{runner.manager.latest() or 'none'} (left in place)")


def _write_test_outputs(config, runner: trainer.ModelRunner, need_test: bool) -> list[str]:
    if not need_test:
        return []
    return runner.write_test_outputs(
        os.path.join(config.test_predictions_dir, f"trial_{runner.trial}"))


def run_finetuning(config: configure_finetuning.FinetuningConfig) -> dict[str, Any] | None:
    """Runs every trial; returns the results summary (None without do_eval)."""
    if console.verbose():
        log.info("fine-tuning config:\n%s", config.to_json())
    elif config.do_train:
        log.info("config: each trial's %s (%s_<trial>/)", trainer.SETTINGS_FILE, config.model_dir)
    defaults = {name: default for name, _, default, _ in config.describe()}
    unused = [k for k in NO_EFFECT_HPARAMS if getattr(config, k) != defaults[k]]
    if unused:
        log.info("hparams accepted for compatibility but without effect here: %s",
                 ", ".join(unused))
    checkpoint.check_path(config.model_dir, "model dir")
    config.check_output_paths(["results_txt", "results_json"],
                              ["preprocessed_data_dir", "test_predictions_dir", "qa_dir"])
    training_utils.run_as_the_commands_run()  # before the strategy starts TensorFlow's context
    strategy = distribution.make_strategy(config.strategy, config.tpu_name, config.tpu_zone,
                                          config.gcp_project)
    preemption.rearm()  # after the strategy: see util/preemption.py
    tokenizer = task_builder.build_tokenizer(config)
    tasks = task_builder.get_tasks(config, tokenizer)
    data_files = []
    for task in tasks:  # bad data fails now, not after a trial's training
        splits = (["train"] if config.do_train else []) + (
            [split for split, _ in task.get_eval_splits()] if config.do_eval else [])
        for split in splits:
            task.get_examples(split)
            data_files += task.split_files(split)
    check_outputs_apart(config, data_files)
    preprocessor = preprocessing.Preprocessor(config, tasks)
    keys = trial_keys(config, tasks, preprocessor)
    summary = None
    for place in outputs.places(config, tasks):  # refused now, not when the run writes there
        write_errors.check_writable(place.what, place.path, place.written_into)
    if config.write_test_outputs:
        write_errors.check_writable("hparam 'test_predictions_dir'", config.test_predictions_dir,
                                    True)
    with place_locks.holding(outputs.places(config, tasks)):
        records, models = [], trial_model.Cache()
        for trial in range(1, config.num_trials + 1):
            if preemption.requested():
                raise preemption.Preempted(f"stopped on a signal before trial {trial}; re-run "
                                           "the same command to continue")
            log.info("=== trial %d/%d: model %s, tasks %s ===", trial, config.num_trials,
                     config.model_name, ",".join(config.task_names))
            try:
                record = run_trial(config, tasks, preprocessor, trial, strategy, keys, models)
            except tf.errors.DataLossError as e:
                # A damaged feature cache would fail every re-run the same way: name it.
                caches = fs.glob(os.path.join(fs.escape(config.preprocessed_data_dir),
                                              "*.tfrecord"))
                raise record_check.damaged_file_error(
                    caches, e, "feature cache file", "; it is derived data: delete it and "
                    "re-run to rebuild it from the task files") from None
            if record is not None:
                records.append(record)
                if distribution.is_chief(strategy) and config.do_eval:
                    summary = write_results(config, [_summary_entry(r) for r in records])
            # A diverged trial keeps its last good checkpoint, as its message says.
            if not config.keep_all_models and trial != config.num_trials and not (
                    record or {}).get("diverged"):
                _remove_checkpoints(trainer.trial_dir(config, trial))
    _report_trials(config, records, summary)
    return summary


def _summary_entry(record: dict[str, Any]) -> dict[str, Any]:
    entry = {k: record[k] for k in ("trial", "seed", "global_step", "results")}
    entry["collapsed"] = record.get("collapsed", {})  # older records have none
    if record.get("diverged"):
        entry["diverged"] = record["diverged"]
    return entry


def _report_trials(config: configure_finetuning.FinetuningConfig, records: list[dict],
                   summary: dict[str, Any] | None) -> None:
    """The run's last lines; NonFiniteError (exit status 3) when every trial diverged: the
    run produced nothing. Some diverged: a warning, and the others' median stands."""
    diverged = [r["trial"] for r in records if r.get("diverged")]
    where = f" (see {config.results_txt})" if summary is not None else ""
    if len(diverged) == config.num_trials:
        raise training_utils.NonFiniteError(
            f"every trial diverged ({len(diverged)} of {config.num_trials}){where}: try a lower "
            "learning_rate, clip_norm 1.0, or compute_dtype float32 or bfloat16")
    if summary is not None:
        counted = summary["median_of"]
        log.info("median over %d trial(s): %s", counted, _line(summary["median"]))
        if summary["collapsed_trials"]:
            log.warning("%d of %d trial(s) collapsed (see %s)", summary["collapsed_trials"],
                        len(records), config.results_txt)
    if diverged:
        log.warning("%d of %d trial(s) diverged (trial %s), left out of the median%s",
                    len(diverged), config.num_trials, ", ".join(map(str, diverged)), where)


def _out_of_memory(error: BaseException,
                   config: configure_finetuning.FinetuningConfig | None) -> str:
    if config is None:
        return out_of_memory.message(error, "these hparams", "lower train_batch_size")
    return out_of_memory.message(
        error, f"train_batch_size {config.train_batch_size}, eval_batch_size "
        f"{config.eval_batch_size} and max_seq_length {config.max_seq_length}",
        "lower eval_batch_size (a re-run keeps the finished trials and resumes the halted "
        "one), or train_batch_size or max_seq_length (a trial resumes only under its own "
        "settings: delete the halted trial's directory or set another model_dir)")


def main(argv: list[str] | None = None) -> int:
    """Command-line entry; returns the exit status (2: bad input or settings, 3: every trial
    diverged, 5: out of memory, 75: stopped by SIGTERM/SIGINT after saving: re-run to
    resume)."""
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="""examples:
  python run_finetuning.py --data-dir data --model-name electra_small \\
      --hparams '{"model_size": "small", "task_names": ["sst"], "num_trials": 3}'
  python run_finetuning.py --data-dir data --model-name electra_small --hparams '{"task_names": ["squad"]}'
  python run_finetuning.py --data-dir data --model-name electra_small --hparams '{"task_names": ["chunk"]}'
Task data: <data-dir>/finetuning_data/<task>/. Every hparam: docs/HPARAMS.md.""")
    parser.add_argument("--data-dir", required=True,
                        help="directory holding finetuning_data/<task>/ and models/. "
                             "Example: --data-dir data")
    parser.add_argument("--model-name", required=True,
                        help="the pre-trained model's name (weights from <data-dir>/models/<name> "
                             "unless hparam init_checkpoint says otherwise). "
                             "Example: --model-name electra_small")
    parser.add_argument("--hparams", default="{}",
                        help="JSON object of hyperparameters, or the path of a .json file holding "
                             "one. Example: --hparams '{\"task_names\": [\"mrpc\"]}'")
    console.add_verbose_flag(parser)
    args = parser.parse_args(argv)
    console.setup(args.verbose)
    config = None
    try:
        with preemption.install():
            config = configure_finetuning.FinetuningConfig.from_hparams(
                args.model_name, args.data_dir, args.hparams)
            run_finetuning(config)
    except preemption.Preempted as e:
        log.warning("%s", e)
        return preemption.EXIT_PREEMPTED
    except training_utils.NonFiniteError as e:
        log.error("%s", e)
        return 3
    except out_of_memory.ERRORS as e:
        log.error("%s", _out_of_memory(e, config))
        return out_of_memory.EXIT_OUT_OF_MEMORY
    except (ValueError, OSError, training_utils.RunLockError) as e:  # OSError: disk full...
        log.error("%s", e)
        return 2
    return 0


if __name__ == "__main__":
    # Everything the run keeps is written and closed by now: skip the interpreter's teardown of
    # TensorFlow (about a second; a preempted run may not have it within its grace period).
    preemption.exit_now(main())
