"""Runs that reach a health state on purpose (and healthy twins), end to end: the state in the
results, in TensorBoard and on tools/inspect_run.py's page; a collapsed fine-tuning trial flagged
in its record and the run summary."""
import json
import math
import os
import subprocess
import sys

import pytest

import build_pretraining_dataset
import demo
import pretrain_fixtures as fx
import run_finetuning
import run_pretraining
from conftest import REPO_ROOT
from configure_pretraining import PretrainingConfig
from pretrain import evaluation, health, input_pipeline, run_setup
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
                      "num_train_steps": 160},
        "uniform": {"adam_bias_correction": True, "lr_decay_after_warmup": True,
                    "num_train_steps": 160, "uniform_generator": True}}


def _first_steps(config: PretrainingConfig, blocks: tuple[int, ...] = (20, 20)) -> None:
    """The first blocks of a run's schedule (their lengths in steps), each followed by the eval
    the loop would run (its health checks, results, history and TensorBoard scalars)."""
    trainer = Trainer(config, run_setup.load_special_ids(config))
    run_setup.prepare_model_dir(config, trainer)
    files = input_pipeline.find_files(config.pretrain_tfrecords)
    iterator = trainer.train_iterator(files.train)
    writer = tu.SummaryWriter(config.model_dir)
    monitor = evaluation.new_monitor(config)
    for block in blocks:
        result = trainer.train_steps(iterator, block)
        writer.scalars(trainer.global_step, result.metrics, prefix="train/")
        evaluation.run_eval(config, trainer, files.eval, True, writer, monitor)
    writer.close()


@pytest.fixture(scope="module")
def real_text_data(shared_data, tmp_path_factory):
    """0.85 MB of the shared corpus built with the uncased vocabulary: (directory, vocab)."""
    root = tmp_path_factory.mktemp("health")
    corpus = root / "corpus"
    corpus.mkdir()
    os.symlink(shared_data / "pretrain_corpus" / "enwiki_wiki_00.txt", corpus / "wiki.txt")
    vocab = str(shared_data / "vocab" / "bert-uncased-vocab.txt")
    assert build_pretraining_dataset.main([
        "--corpus-dir", str(corpus), "--vocab-file", vocab,
        "--output-dir", str(root / "pretrain_tfrecords"), "--max-seq-length", "128",
        "--num-out-files", "4", "--eval-fraction", "0.1", "--no-progress"]) == 0
    return root, vocab


def _real_text_run(real_text_data, name: str) -> PretrainingConfig:
    """The first 40 steps of RUNS[name] on the real text: the official optimizer (Adam without
    bias correction) stalls the discriminator by step 40 (the calibration run: real-token AUC
    0.54 at step 40, 0.48-0.52 after), the corrected one, with a learned or a uniform
    generator, ranks replaced tokens (0.86 and 0.87 there). Each run is its own test's, so that
    two workers can train them at once."""
    root, vocab = real_text_data
    config = PretrainingConfig.from_hparams(name, str(root),
                                            dict(RECIPE, vocab_file=vocab, **RUNS[name]))
    _first_steps(config)
    return config


def test_official_optimizer_with_a_short_warmup_stalls_the_discriminator(real_text_data, capsys):
    config = _real_text_run(real_text_data, "official")
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


def test_corrected_optimizer_stays_healthy(real_text_data):
    history = evaluation.read_history(_real_text_run(real_text_data, "corrected"))
    assert [(h["global_step"], h["health"]) for h in history] == [(20, {}), (40, {})]
    assert history[1]["disc_auc_real"] > 0.75


def test_a_uniform_generator_stays_healthy(real_text_data):
    """Random replacements are easy to spot: the discriminator keeps ranking them, and the
    generator checks (which read only learned generators) stay silent."""
    history = evaluation.read_history(_real_text_run(real_text_data, "uniform"))
    assert [(h["global_step"], h["health"]) for h in history] == [(20, {}), (40, {})]
    assert history[1]["disc_auc_real"] > 0.8


@pytest.fixture(scope="module")
def demo_recipe_run(tmp_path_factory):
    """demo.py's corpus, vocabulary and pre-training recipe (float32, as on a host without
    bfloat16), trained 175 of its 1000 steps with evals at steps 100 and 175."""
    work = tmp_path_factory.mktemp("demo_recipe")
    subprocess.run([sys.executable, str(REPO_ROOT / "demo.py"), "--write-corpus", str(work)],
                   check=True, capture_output=True)
    tfrecords = work / "pretrain_tfrecords"
    assert build_pretraining_dataset.main([
        "--corpus-dir", str(work / "corpus"), "--vocab-size", "4000", "--output-dir",
        str(tfrecords), "--max-seq-length", "128", "--no-progress"]) == 0
    hparams = demo.pretrain_hparams(str(tfrecords / "spm.model"), 4000, 1000, "float32")
    config = PretrainingConfig.from_hparams("demo", str(work), hparams)
    _first_steps(config, blocks=(100, 75))
    return config


def test_the_demos_recipe_is_healthy_at_its_first_eval_then_its_discriminator_stalls(
        demo_recipe_run):
    """The first eval after warm-up is healthy (real-token AUC 0.74 in the measured run); by
    step 175 the 1/4-width generator at temperature 1 has left the 3-layer discriminator
    ranking replaced tokens near chance (0.61; 0.60 at step 200) and calling none replaced:
    disc_stalled, true there (docs/PRETRAINING.md, "Reading a run"). The stall rule is checked
    from step 120 on (100 warm-up steps + 20); the AUC reached the rule's 0.70 line at step 125
    and was 0.66 at 150, so step 175 shows the stall with about the margin step 200 had."""
    history = evaluation.read_history(demo_recipe_run)
    assert [(h["global_step"], h["health"]) for h in history] == [
        (100, {}), (175, {"disc_stalled": 175})]
    assert history[0]["disc_auc_real"] > 0.7 > 0.65 > history[1]["disc_auc_real"]
    assert history[1]["disc_positive_rate"] < 0.001 < history[0]["disc_positive_rate"]
    # Not a collapse: the token vectors still differ.
    assert history[1]["repr_mean_cosine"] < 0.9 and history[1]["repr_min_dim_spread"] > 0.3


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
    assert trial["collapsed"] == {"sst": "every dev prediction is '0'"}  # SST's label
    assert summary["collapsed_trials"] == 1
    assert summary["median"]["sst"]["accuracy"] == trial["results"]["sst"]["accuracy"] == 50.0
    text = open(config.results_txt).read()
    assert "COLLAPSED (sst: every dev prediction is '0')" in text
    assert "(1 collapsed trial(s) included)" in text


# -- Toy runs (tests/pretrain_fixtures.py) that reach the remaining states on purpose -----------

def _toy_run(data_dir: str, name: str, **overrides) -> tuple[PretrainingConfig, list]:
    """A run of run_pretraining on the toy data; its config and eval history."""
    config = PretrainingConfig.from_hparams(name, data_dir, fx.tiny_hparams(**dict(
        dict(do_eval=True, num_warmup_steps=10, iterations_per_loop=20,
             save_checkpoints_steps=1000), **overrides)))
    run_pretraining.train_or_eval(config)
    return config, evaluation.read_history(config)


@pytest.fixture(scope="module")
def repetitive_data(tmp_path_factory):
    """Text nearly all of one word (95%), as a corpus of repeated boilerplate."""
    return fx.write_data(str(tmp_path_factory.mktemp("repetitive")), repetitive=True)


def test_a_generator_that_has_learned_repetitive_text_is_too_strong(repetitive_data):
    """At lr 1e-2 the generator samples the original word at most masked positions by step 40
    (measured: 75-84%), so about 2% of the tokens are replaced (8% at step 20)."""
    _, history = _toy_run(repetitive_data, "strong", learning_rate=1e-2, num_train_steps=40,
                          eval_every_steps=20)
    assert [(h["global_step"], "generator_too_strong" in h["health"]) for h in history] == [
        (20, False), (40, True)]
    assert history[1]["health"]["generator_too_strong"] == 40
    assert history[1]["disc_replaced_rate"] < 0.05 < history[0]["disc_replaced_rate"]
    assert history[1]["sampled_masked_lm_accuracy"] > 0.6


def test_electra_15_with_a_generator_yet_to_learn_calls_every_token_replaced(tmp_path, caplog,
                                                                          capsys):
    """ELECTRA 15% trains the discriminator only at the masked positions; while the generator
    is weak nearly all of them are replaced, and it learns to answer "replaced" everywhere
    (measured on the toy language: every real token called replaced where 13.7% were, real-token
    AUC 0.46 at step 20, 0.52 at step 40). Step 20 is within the discriminator's grace (10
    warm-up steps and 20 more), so the state is announced at step 40, with electra_15's advice,
    in the log and on inspect_run's page (both read the run's config)."""
    data = fx.write_data(str(tmp_path / "toy"))
    with caplog.at_level("WARNING", logger=health.__name__):
        config, history = _toy_run(data, "electra_15", electra_15=True, num_train_steps=40,
                                   eval_every_steps=20)
    assert [(h["global_step"], "disc_all_replaced" in h["health"]) for h in history] == [
        (20, False), (40, True)]
    assert history[1]["health"]["disc_all_replaced"] == 40
    assert history[1]["disc_positive_rate"] == 1.0 > 0.2 > history[1]["disc_replaced_rate"]
    assert history[1]["disc_auc_real"] < 0.6
    began = [r.getMessage() for r in caplog.records
             if r.getMessage().startswith("health: disc_all_replaced since step 40")]
    assert len(began) == 1 and "Try: electra_15 false" in began[0]
    assert load_tool("inspect_run").main([config.model_dir]) == 0
    page = capsys.readouterr().out
    assert "disc_all_replaced: began at step 40, active" in page
    assert "try: electra_15 false" in page


def test_the_official_optimizer_at_a_high_rate_collapses_the_token_vectors(repetitive_data):
    """Adam without bias correction at lr 2e-2 after 10 warm-up steps (CALIBRATION.md's
    failure, pushed to a toy): by step 20 every last-layer token vector points the same way
    (measured: mean cosine 1.000); the corrected run above kept them apart (0.90)."""
    _, history = _toy_run(repetitive_data, "collapse", learning_rate=2e-2,
                          adam_bias_correction=False, lr_decay_after_warmup=False,
                          num_train_steps=20)
    assert history[-1]["health"]["collapse"] == 20
    assert history[-1]["repr_mean_cosine"] > 0.99


def test_a_frozen_generator_that_was_never_trained_is_idle(repetitive_data):
    """freeze_generator (the two-stage recipe) without a trained generator to start from: the
    same text and rate, and 100 steps after warm-up its held-out loss is still that of a uniform
    guess (the learned generator above: 0.46 by step 40)."""
    _, history = _toy_run(repetitive_data, "idle", learning_rate=1e-2, freeze_generator=True,
                          untied_generator=True, generator_hidden_size=1.0,
                          generator_layers=1.0, num_train_steps=110)
    assert history[-1]["global_step"] == 110 and history[-1]["health"] == {"generator_idle": 110}
    assert history[-1]["masked_lm_loss"] > 0.9 * math.log(fx.VOCAB_SIZE)


def test_held_out_text_unlike_the_training_text_makes_the_held_out_loss_rise(repetitive_data,
                                                                             tmp_path):
    """eval_tfrecords of another text (nearly all w1, the training text nearly all w0): the more
    the generator learns its training text, the worse it predicts the held-out one (measured:
    3.24 at step 20, 4.08, 5.27, 5.97 by step 50)."""
    other = fx.write_data(str(tmp_path / "other"), repetitive=True, repeated_word=1, seed=1)
    _, history = _toy_run(repetitive_data, "rising", learning_rate=1e-2, num_train_steps=50,
                          eval_every_steps=10, iterations_per_loop=10, eval_tfrecords=os.path.join(
                              other, "pretrain_tfrecords", "pretrain_data.tfrecord-3-of-4"))
    assert [h["global_step"] for h in history] == [10, 20, 30, 40, 50]
    assert ["loss_rising" in h["health"] for h in history] == [False] * 4 + [True]
    losses = [h["masked_lm_loss"] for h in history]
    assert min(losses[2:]) > 1.1 * min(losses[:2])


def test_a_schedule_at_zero_before_the_last_step_is_reported_to_the_end(repetitive_data):
    """lr_decay_power 1000 drives the rate to 0 (in float32) 10 steps after warm-up: the check
    after the first block of steps fires, and the final eval still reports it."""
    config, history = _toy_run(repetitive_data, "lr_zero", lr_decay_power=1000.0,
                               num_train_steps=60)
    assert history[-1]["global_step"] == 60
    assert history[-1]["health"]["lr_zero_early"] == 20
    assert json.load(open(config.results_json))["health"]["lr_zero_early"] == 20
    assert tu.read_scalars(config.model_dir)["health/lr_zero_early"][0] == (20, 1.0)


def test_a_model_holding_a_nan_reports_a_non_finite_held_out_loss(repetitive_data, tmp_path):
    """A weight that is NaN (as in a checkpoint converted from a broken run) evaluated: the
    held-out losses are NaN and the state says so."""
    config = PretrainingConfig.from_hparams("nan", repetitive_data, fx.tiny_hparams(
        model_dir=str(tmp_path / "nan")))
    trainer = Trainer(config, run_setup.load_special_ids(config))
    trainer.model_vars["discriminator_predictions/dense_1/bias"].assign([math.nan])
    files = input_pipeline.find_files(config.pretrain_tfrecords)
    metrics = evaluation.run_eval(config, trainer, files.eval, True)
    assert math.isnan(metrics["disc_loss"]) and math.isnan(metrics["loss"])
    history = evaluation.read_history(config)
    assert history[-1]["health"] == {"loss_not_finite": 0}


def test_periodic_evals_build_the_held_out_pipeline_once(repetitive_data, tmp_path, monkeypatch):
    """Every periodic eval reads the same held-out batches: the input pipeline (and the health
    checks' first batch) is built at the first eval and reused, the eval step traced once, and
    a second eval of the same weights gives the same metrics."""
    config = PretrainingConfig.from_hparams("evals", repetitive_data, fx.tiny_hparams(
        model_dir=str(tmp_path / "evals")))
    trainer = Trainer(config, run_setup.load_special_ids(config))
    files = input_pipeline.find_files(config.pretrain_tfrecords)
    built = []
    real_eval_dataset = input_pipeline.eval_dataset
    monkeypatch.setattr(input_pipeline, "eval_dataset",
                        lambda *a, **k: built.append(k["num_batches"]) or real_eval_dataset(*a, **k))
    first = evaluation.run_eval(config, trainer, files.eval, True)
    second = evaluation.run_eval(config, trainer, files.eval, True)
    assert sorted(built) == [1, config.num_eval_steps]  # not once more per eval
    assert trainer._eval_step_fn.experimental_get_tracing_count() == 1
    assert second == pytest.approx(first)
