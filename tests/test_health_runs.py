"""Runs that reach a health state on purpose (and a healthy twin), end to end: the state in the
results, in TensorBoard and on tools/inspect_run.py's page; a collapsed fine-tuning trial flagged
in its record and the run summary."""
import json
import os

import pytest

import build_pretraining_dataset
import run_finetuning
from configure_pretraining import PretrainingConfig
from pretrain import evaluation, input_pipeline, run_setup
from pretrain.trainer import Trainer
from tests.test_docs import load_tool
from tests.test_finetune_data import make_config
from util import training_utils as tu

# CALIBRATION.md's tiny recipe on real text: hidden 128, 2 layers, generator 1/4 wide, vocab 30522,
# batch 16, lr 1e-3, 20 warm-up steps, the schedules of docs/PRETRAINING.md's calibration runs
# (240 and 160 steps); the tests run their first 40 steps, with evals at steps 20 and 40.
RECIPE = {"model_size": "small", "embedding_size": 64, "generator_hidden_size": 0.25,
          "model_hparam_overrides": {"hidden_size": 128, "num_hidden_layers": 2,
                                     "num_attention_heads": 2, "intermediate_size": 512},
          "train_batch_size": 16, "eval_batch_size": 16, "max_seq_length": 128,
          "learning_rate": 1e-3, "num_warmup_steps": 20, "num_eval_steps": 4, "seed": 0}
RUNS = {"official": {"adam_bias_correction": False, "lr_decay_after_warmup": False,
                     "num_train_steps": 240},
        "corrected": {"adam_bias_correction": True, "lr_decay_after_warmup": True,
                      "num_train_steps": 160}}


def _first_steps(config: PretrainingConfig, blocks: int = 2, block: int = 20) -> None:
    """The first blocks of a run's schedule, each followed by the eval the loop would run
    (its health checks, results, history and TensorBoard scalars)."""
    trainer = Trainer(config, run_setup.load_special_ids(config))
    run_setup.prepare_model_dir(config, trainer)
    files = input_pipeline.find_files(config.pretrain_tfrecords)
    iterator = trainer.train_iterator(files.train)
    writer = tu.SummaryWriter(config.model_dir)
    monitor = evaluation.new_monitor(config)
    for _ in range(blocks):
        result = trainer.train_steps(iterator, block)
        writer.scalars(trainer.global_step, result.metrics, prefix="train/")
        evaluation.run_eval(config, trainer, files.eval, True, writer, monitor)
    writer.close()


@pytest.fixture(scope="module")
def real_text_runs(shared_data, tmp_path_factory):
    """The official optimizer (Adam without bias correction) and the corrected one on 0.85 MB of
    the shared corpus: the first stalls the discriminator by step 40 (the calibration run:
    real-token AUC 0.54 at step 40, 0.48-0.52 after), the second ranks replaced tokens (0.86)."""
    root = tmp_path_factory.mktemp("health")
    corpus = root / "corpus"
    corpus.mkdir()
    os.symlink(shared_data / "pretrain_corpus" / "enwiki_wiki_00.txt", corpus / "wiki.txt")
    vocab = str(shared_data / "vocab" / "bert-uncased-vocab.txt")
    assert build_pretraining_dataset.main([
        "--corpus-dir", str(corpus), "--vocab-file", vocab,
        "--output-dir", str(root / "pretrain_tfrecords"), "--max-seq-length", "128",
        "--num-out-files", "4", "--eval-fraction", "0.1", "--no-progress"]) == 0
    runs = {}
    for name, settings in RUNS.items():
        config = PretrainingConfig.from_hparams(name, str(root),
                                                dict(RECIPE, vocab_file=vocab, **settings))
        _first_steps(config)
        runs[name] = config
    return runs


def test_official_optimizer_with_a_short_warmup_stalls_the_discriminator(real_text_runs, capsys):
    config = real_text_runs["official"]
    history = evaluation.read_history(config)
    assert [(h["global_step"], h["health"]) for h in history] == [
        (20, {}), (40, {"disc_stalled": 40})]
    assert history[1]["disc_positive_rate"] < 0.01 and history[1]["disc_auc_real"] < 0.7
    assert json.load(open(config.results_json))["health"] == {"disc_stalled": 40}
    scalars = tu.read_scalars(config.model_dir)
    assert scalars["health/disc_stalled"] == [(20, 0.0), (40, 1.0)]
    assert scalars["health/collapse"] == [(20, 0.0), (40, 0.0)]

    inspect_run = load_tool("inspect_run")
    png = os.path.join(config.model_dir, "curves.png")
    assert inspect_run.main([config.model_dir, "--png", png]) == 0
    page = capsys.readouterr().out
    assert "health at the newest eval: disc_stalled since step 40" in page
    assert "disc_stalled: began at step 40, active" in page and "try: adam_bias_correction" in page
    assert "held-out evals (2):" in page and "training (block means, 2 points):" in page


def test_corrected_optimizer_stays_healthy(real_text_runs):
    history = evaluation.read_history(real_text_runs["corrected"])
    assert [(h["global_step"], h["health"]) for h in history] == [(20, {}), (40, {})]
    assert history[1]["disc_auc_real"] > 0.75


def test_a_trial_on_a_nearly_one_class_training_file_is_flagged_collapsed(tmp_path):
    """250 negative and 6 positive training sentences (CALIBRATION.md's measurement on SST-2):
    every dev prediction negative; the trial and the summary say so, the median keeps it."""
    task_dir = tmp_path / "finetuning_data" / "sst"
    task_dir.mkdir(parents=True)
    words = ["the", "a", "cat", "dog", "sat", "is"]
    rows = [(" ".join(words[(i + j) % 6] for j in range(4)), 1 if i % 42 == 41 else 0)
            for i in range(256)]
    (task_dir / "train.tsv").write_text(
        "sentence\tlabel\n" + "".join(f"{s}\t{label}\n" for s, label in rows), encoding="utf-8")
    (task_dir / "dev.tsv").write_text(
        "sentence\tlabel\n" + "".join(f"{s}\t{i % 2}\n" for i, (s, _) in enumerate(rows[:20])),
        encoding="utf-8")
    config = make_config(tmp_path, ["sst"], num_train_epochs=1.0, train_batch_size=32,
                         learning_rate=1e-3, adam_bias_correction=True, embedding_size=16,
                         model_hparam_overrides={"hidden_size": 32, "num_hidden_layers": 1,
                                                 "num_attention_heads": 2,
                                                 "intermediate_size": 64})
    summary = run_finetuning.run_finetuning(config)
    trial = summary["trials"][0]
    assert trial["collapsed"] == {"sst": "every dev prediction is class 0"}
    assert summary["collapsed_trials"] == 1
    assert summary["median"]["sst"]["accuracy"] == trial["results"]["sst"]["accuracy"] == 50.0
    text = open(config.results_txt).read()
    assert "COLLAPSED (sst: every dev prediction is class 0)" in text
    assert "(1 collapsed trial(s) included)" in text
