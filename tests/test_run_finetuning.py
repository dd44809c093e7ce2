"""run_finetuning end to end: trials, results files, test predictions, resuming halted trials."""
import json
import os
import re
import shutil
import types

import numpy as np
import pytest

import build_pretraining_dataset
import configure_finetuning
import run_finetuning
import run_pretraining
from finetune import preprocessing
from finetune import task_builder
from finetune import trainer
from finetune import trial_model
from util import checkpoint
from util import loss_scale, step_engine, training_utils

from tests.test_finetune_data import make_config, write_fixtures

TINY = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
        "intermediate_size": 64, "max_position_embeddings": 64}


class Halt(Exception):
    """Stands in for a crash or a pre-empted job."""


def fixture_config(tmp_path, **hparams):
    write_fixtures(tmp_path, tasks={"cola", "sst"})
    values = dict(model_hparam_overrides=TINY, embedding_size=16, train_batch_size=2,
                  num_train_epochs=3.0, learning_rate=1e-3, adam_bias_correction=True)
    values.update(hparams)
    return make_config(tmp_path, ["cola", "sst"], **values)


def final_tensors(config, trial=1):
    return checkpoint.read_all(trainer.trial_dir(config, trial))


def test_halted_trial_resumes_to_the_same_weights(tmp_path, monkeypatch):
    # 5 examples padded to 6, batch 2: 3 steps per epoch, 9 steps; checkpoints every 2 steps.
    # Batches cut to length buckets of 4 (the fixture's sentences are shorter than 16).
    straight = fixture_config(tmp_path / "a", save_checkpoints_steps=2, pad_to_multiple_of=4)
    run_finetuning.run_finetuning(straight)

    halted = fixture_config(tmp_path / "b", save_checkpoints_steps=2, pad_to_multiple_of=4)
    real_check = training_utils.check_finite

    def crash_at_step_5(values, step, context=""):
        if step == 5:
            raise Halt()
        real_check(values, step, context)

    monkeypatch.setattr(trainer.training_utils, "check_finite", crash_at_step_5)
    with pytest.raises(Halt):
        run_finetuning.run_finetuning(halted)
    assert checkpoint.CheckpointManager(trainer.trial_dir(halted, 1)).latest().endswith("-4")
    monkeypatch.setattr(trainer.training_utils, "check_finite", real_check)
    summary = run_finetuning.run_finetuning(halted)  # continues at step 4 (mid-epoch 2)

    a, b = final_tensors(straight), final_tensors(halted)
    assert a["global_step"] == b["global_step"] == 9
    assert sorted(a) == sorted(b)
    for name in a:
        np.testing.assert_allclose(a[name], b[name], rtol=1e-5, atol=1e-6, err_msg=name)
    assert summary["trials"][0]["global_step"] == 9


def test_time_based_checkpoints_at_step_boundaries(tmp_path, monkeypatch):
    # 3 steps per epoch, one loop per epoch; a deadline that has always passed ends the loop
    # after every step with a save (save_checkpoints_steps is 1000000).
    config = fixture_config(tmp_path, num_train_epochs=2.0, save_checkpoints_secs=1e-6,
                            iterations_per_loop=100)
    saved, real_save = [], trainer.ModelRunner.save

    def recording_save(self):
        saved.append(self.global_step)
        return real_save(self)

    monkeypatch.setattr(trainer.ModelRunner, "save", recording_save)
    run_finetuning.run_finetuning(config)
    assert saved == [1, 2, 3, 4, 5, 6]
    saved.clear()
    # Blocks of up to 100 steps: the first is one step (its progress line shows when tracing
    # ended), the others run to each epoch's end.
    monkeypatch.setattr(trainer, "loop_block", lambda steps_per_epoch, iterations: iterations)
    blocks, real_run = [], step_engine.StepEngine.run

    def recording_run(self, iterator, num_steps, *args):
        blocks.append(num_steps)
        return real_run(self, iterator, num_steps, *args)

    monkeypatch.setattr(step_engine.StepEngine, "run", recording_run)
    run_finetuning.run_finetuning(fixture_config(tmp_path / "steps", num_train_epochs=2.0,
                                                 iterations_per_loop=100))
    assert saved == [3, 6]  # by steps alone: the end of each epoch
    assert blocks == [1, 2, 3]


def test_resuming_with_other_settings_is_refused_and_eval_only_runs(tmp_path):
    config = fixture_config(tmp_path, do_eval=False, num_train_epochs=1.0)
    assert run_finetuning.run_finetuning(config) is None
    assert not os.path.exists(config.results_json)
    # do_train false: evaluates the trial's fine-tuned checkpoint.
    evaluated = run_finetuning.run_finetuning(
        fixture_config(tmp_path, do_train=False, num_train_epochs=1.0))
    assert evaluated["trials"][0]["global_step"] == 3
    assert set(evaluated["median"]) == {"cola", "sst"}
    changed = fixture_config(tmp_path, do_eval=False, num_train_epochs=1.0, learning_rate=5e-4)
    with pytest.raises(ValueError, match=r"other settings \(learning_rate: 0.001 -> 0.0005\)"):
        run_finetuning.run_finetuning(changed)


def test_trials_median_and_finished_trials_are_reused(tmp_path, monkeypatch, instances_of):
    config = fixture_config(tmp_path, num_trials=3, keep_all_models=False, num_train_epochs=1.0,
                            pad_to_multiple_of=4)
    built = instances_of(trial_model.TrialModel)
    summary = run_finetuning.run_finetuning(config)
    # One model, one trace of the training loop and one of the forward pass for 3 trials of
    # 3 steps and 6 evaluations (2 tasks) over batches of several lengths.
    assert len(built) == 1
    assert built[0].engine._loop_fn.experimental_get_tracing_count() == 1
    assert built[0].predict_fn(None).experimental_get_tracing_count() == 1
    # The reused model, reset, trains trial 3 as a model built for it alone does.
    fresh_config = fixture_config(tmp_path / "fresh", num_train_epochs=1.0, pad_to_multiple_of=4)
    tasks = task_builder.get_tasks(fresh_config)
    fresh = trainer.ModelRunner(fresh_config, tasks,
                                preprocessing.Preprocessor(fresh_config, tasks), trial=3)
    fresh.initialize()
    fresh.train()
    assert len(built) == 2
    reused = final_tensors(config, trial=3)
    for name, value in checkpoint.by_name(fresh.model.variables).items():
        np.testing.assert_allclose(reused[name], value.numpy(), rtol=1e-5, atol=1e-6,
                                   err_msg=name)
    assert [t["seed"] for t in summary["trials"]] == [0, 1, 2]
    accuracies = [t["results"]["sst"]["accuracy"] for t in summary["trials"]]
    assert summary["median"]["sst"]["accuracy"] == float(np.median(accuracies))
    assert set(summary["median"]) == {"cola", "sst"}
    # keep_all_models false: only the last trial keeps its weights (results stay).
    assert checkpoint.CheckpointManager(trainer.trial_dir(config, 1)).latest() is None
    assert checkpoint.CheckpointManager(trainer.trial_dir(config, 3)).latest() is not None

    def no_training(*args, **kwargs):
        raise AssertionError("a finished trial was run again")

    monkeypatch.setattr(trainer.ModelRunner, "__init__", no_training)
    again = run_finetuning.run_finetuning(config)
    assert again["trials"] == json.loads(json.dumps(summary["trials"]))
    text = open(config.results_txt).read()
    assert text.count("\ntrial ") == 3 and "median of 3: cola: accuracy:" in text


def test_end_to_end_on_sst_and_cola_slices(shared_data, tmp_path):
    """Pre-train a tiny model briefly on a slice of the shared corpus, then fine-tune it."""
    data_dir = tmp_path / "data"
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    with open(shared_data / "pretrain_corpus" / "enwiki_wiki_00.txt", encoding="utf-8") as f:
        (corpus / "slice.txt").write_text(f.read(200_000), encoding="utf-8")
    vocab = shared_data / "vocab" / "bert-uncased-vocab.txt"
    assert build_pretraining_dataset.main([
        "--corpus-dir", str(corpus), "--vocab-file", str(vocab), "--output-dir",
        str(data_dir / "pretrain_tfrecords"), "--max-seq-length", "32", "--num-out-files", "2",
        "--eval-fraction", "0", "--no-progress"]) == 0
    shutil.copy(vocab, data_dir / "vocab.txt")
    model = {"model_hparam_overrides": TINY, "embedding_size": 16, "max_seq_length": 32}
    assert run_pretraining.main([
        "--data-dir", str(data_dir), "--model-name", "tiny", "--hparams", json.dumps(dict(
            model, train_batch_size=8, num_train_steps=6, num_warmup_steps=2, do_eval=False,
            learning_rate=1e-3, adam_bias_correction=True))]) == 0

    hparams = dict(model, task_names=["sst", "cola"],
                   raw_data_dir=str(shared_data / "glue" / "{task}"), max_train_examples=96,
                   max_eval_examples=64, train_batch_size=16, eval_batch_size=64,
                   num_train_epochs=1.0, write_test_outputs=True, n_writes_test=1, num_trials=2)
    assert run_finetuning.main(["--data-dir", str(data_dir), "--model-name", "tiny",
                                "--hparams", json.dumps(hparams)]) == 0
    config = configure_finetuning.FinetuningConfig.from_hparams("tiny", str(data_dir), hparams)
    settings = json.loads(open(os.path.join(trainer.trial_dir(config, 1),
                                            trainer.SETTINGS_FILE)).read())
    assert settings["init"] == "pretrained"

    results_dir = data_dir / "models" / "tiny" / "results"
    summary = json.loads((results_dir / "sst,cola_results.json").read_text())
    assert [t["trial"] for t in summary["trials"]] == [1, 2]
    assert 0.0 <= summary["median"]["sst"]["accuracy"] <= 100.0
    assert -100.0 <= summary["median"]["cola"]["mcc"] <= 100.0
    assert "median of 2" in (results_dir / "sst,cola_results.txt").read_text()

    # GLUE submission files of trial 1 only, one row per test example, valid labels.
    predictions = data_dir / "models" / "tiny" / "test_predictions"
    assert sorted(os.listdir(predictions)) == ["trial_1"]
    for name, n_test in (("SST-2.tsv", 1821), ("CoLA.tsv", 1063)):
        lines = (predictions / "trial_1" / name).read_text().splitlines()
        assert lines[0] == "index\tprediction"
        assert len(lines) == n_test + 1
        assert {line.split("\t")[1] for line in lines[1:]} <= {"0", "1"}
        assert [int(line.split("\t")[0]) for line in lines[1:]] == list(range(n_test))

    # TensorBoard: training curves per trial and dev metrics.
    trial_dir = trainer.trial_dir(config, 1)
    scalars = training_utils.read_scalars(trial_dir)
    steps = (96 + 96) // 16
    assert [s for s, _ in scalars["train/loss"]][-1] == steps
    assert "sst/accuracy" in training_utils.read_scalars(os.path.join(trial_dir, "eval"))


def test_float16_trains_with_dynamic_loss_scaling(tmp_path):
    config = fixture_config(tmp_path, compute_dtype="float16", num_train_epochs=1.0,
                            do_eval=False)
    run_finetuning.run_finetuning(config)
    tensors = final_tensors(config)
    assert tensors["global_step"] == 3
    assert 1.0 <= tensors["finetune_state/loss_scale"] <= loss_scale.INITIAL_SCALE
    assert all(np.isfinite(v).all() for v in tensors.values())


# -- trials are independent: one trial's divergence does not end the run -------------------------


class ScriptedRunner:
    """trainer.ModelRunner without a model, for the run's bookkeeping: trains 3 steps at once;
    PLAN[trial] "train" diverges at step 2, "eval" gives NaN dev results."""
    PLAN: dict[int, str] = {}
    trained: list[int] = []

    def __init__(self, config, tasks, preprocessor, trial=1, strategy=None, models=None):
        self.config, self.trial, self.seed = config, trial, config.seed + trial - 1
        self.model_dir = trainer.trial_dir(config, trial)
        self.train_steps, self.global_step, self.collapsed = 3, 0, {}
        latest = os.path.join(self.model_dir, "model.ckpt-1")
        self.manager = types.SimpleNamespace(latest=lambda: latest)

    def initialize(self):
        os.makedirs(self.model_dir, exist_ok=True)
        open(os.path.join(self.model_dir, "model.ckpt-1.index"), "w").close()

    def train(self):
        ScriptedRunner.trained.append(self.trial)
        if self.PLAN.get(self.trial) == "train":
            self.global_step = 2
            raise training_utils.NonFiniteError(
                f"non-finite values at step 2 (trial {self.trial}): loss=nan", 2, ["loss"])
        self.global_step = 3

    def evaluate(self):
        accuracy = float("nan") if self.PLAN.get(self.trial) == "eval" else 50.0 + self.trial
        return {"sst": {"accuracy": accuracy, "loss": 0.5}}

    def write_test_outputs(self, output_dir):
        return []


def _scripted_run(tmp_path, monkeypatch, plan: dict, **hparams) -> tuple:
    """run_finetuning.main over 3 scripted trials; (exit status, results json, results txt)."""
    monkeypatch.setattr(ScriptedRunner, "PLAN", plan)
    monkeypatch.setattr(ScriptedRunner, "trained", [])
    monkeypatch.setattr(trainer, "ModelRunner", ScriptedRunner)
    write_fixtures(tmp_path, tasks={"sst"})
    config = make_config(tmp_path, ["sst"], num_trials=3, **hparams)
    values = dict(task_names=["sst"], vocab_size=config.vocab_size, max_seq_length=16,
                  init_checkpoint="", num_trials=3, **hparams)
    code = run_finetuning.main(["--data-dir", str(tmp_path), "--model-name", "m",
                                "--hparams", json.dumps(values)])
    if not os.path.exists(config.results_json):
        return code, None, None
    return code, json.load(open(config.results_json)), open(config.results_txt).read()


def test_a_diverged_trial_is_recorded_and_the_next_trials_run(tmp_path, monkeypatch, caplog):
    code, summary, text = _scripted_run(tmp_path, monkeypatch, {2: "train"},
                                        keep_all_models=False)
    assert code == 0 and ScriptedRunner.trained == [1, 2, 3]
    assert [t.get("diverged", "") for t in summary["trials"]] == [
        "", "non-finite values at step 2 (trial 2): loss=nan", ""]
    assert summary["trials"][1]["results"] == {} and summary["trials"][1]["global_step"] == 2
    assert summary["diverged_trials"] == 1 and summary["median_of"] == 2
    assert summary["median"]["sst"]["accuracy"] == 52.0  # trials 1 and 3: 51 and 53
    assert "trial 2 (seed 1, step 2): DIVERGED (non-finite values at step 2" in text
    assert "median of 2: sst: accuracy: 52.00 - loss: 0.50 (1 diverged trial(s) left out)" in text
    assert "1 of 3 trial(s) diverged (trial 2), left out of the median" in caplog.text
    # Its record says so, and its last good checkpoint stays (keep_all_models false: trial 1's
    # is removed).
    record = json.load(open(os.path.join(tmp_path, "models", "m", "finetuning_models",
                                         "sst_model_2", trainer.RESULTS_FILE)))
    assert record["diverged"].startswith("non-finite values at step 2")
    models = tmp_path / "models" / "m" / "finetuning_models"
    assert (models / "sst_model_2" / "model.ckpt-1.index").exists()
    assert not (models / "sst_model_1" / "model.ckpt-1.index").exists()


def test_a_diverged_trial_is_not_trained_again_by_a_rerun(tmp_path, monkeypatch):
    _scripted_run(tmp_path, monkeypatch, {2: "train"})
    code, summary, _ = _scripted_run(tmp_path, monkeypatch, {2: "train"})
    assert code == 0 and ScriptedRunner.trained == []  # every record reused
    assert summary["diverged_trials"] == 1


def test_a_trial_whose_dev_results_are_not_finite_diverged(tmp_path, monkeypatch):
    code, summary, text = _scripted_run(tmp_path, monkeypatch, {1: "eval"})
    assert code == 0 and ScriptedRunner.trained == [1, 2, 3]
    assert summary["trials"][0]["diverged"].startswith(
        "non-finite dev results at step 3 (trial 1): sst accuracy=nan")
    assert summary["trials"][0]["results"] == {}
    assert summary["median"]["sst"]["accuracy"] == 52.5  # trials 2 and 3, not NaN
    assert "NaN" not in json.dumps(summary)


def test_every_trial_diverged_exits_3_with_the_record_written(tmp_path, monkeypatch, caplog):
    code, summary, text = _scripted_run(tmp_path, monkeypatch, {1: "train", 2: "train",
                                                                3: "eval"})
    assert code == 3 and ScriptedRunner.trained == [1, 2, 3]
    assert summary["diverged_trials"] == 3 and summary["median"] == {}
    assert "median: none (all 3 trial(s) diverged)" in text
    assert re.search(r"every trial diverged \(3 of 3\) \(see .*sst_results\.txt\)", caplog.text)


def test_without_do_eval_a_diverged_trial_still_lets_the_others_run(tmp_path, monkeypatch,
                                                                    caplog):
    code, summary, _ = _scripted_run(tmp_path, monkeypatch, {1: "train"}, do_eval=False)
    assert code == 0 and summary is None and ScriptedRunner.trained == [1, 2, 3]
    assert "1 of 3 trial(s) diverged (trial 1)" in caplog.text
    code, _, _ = _scripted_run(tmp_path / "all", monkeypatch, {1: "train", 2: "train",
                                                               3: "train"}, do_eval=False)
    assert code == 3
