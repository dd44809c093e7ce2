"""run_pretraining end to end on a tiny model: model dir, checkpoint keys, eval results, resume
rules, init_checkpoint, NaN stop, run lock, gradient accumulation and float16 loss scaling."""
import json
import math
import os

import numpy as np
import pytest
import tensorflow as tf

import pretrain_fixtures as fx
import run_pretraining
from configure_pretraining import PretrainingConfig
from model import model_dir as model_dir_lib
from pretrain import evaluation, input_pipeline, loop, masking, run_setup
from pretrain import rng as rng_lib
from pretrain.trainer import Trainer
from util import checkpoint
from util import training_utils as tu
from util.hparams import HParamError

SPECIAL = masking.SpecialIds(pad=fx.PAD, cls=fx.CLS, sep=fx.SEP, mask=fx.MASK)
NO_DROPOUT = dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


def _config(data_dir, name="m", **overrides):
    return PretrainingConfig.from_hparams(name, str(data_dir), fx.tiny_hparams(**overrides))


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    data_dir = fx.write_data(str(tmp_path_factory.mktemp("data")))
    config = _config(data_dir, do_eval=True, eval_every_steps=5, iterations_per_loop=2,
                     save_checkpoints_steps=4, keep_checkpoint_max=2)
    metrics = run_pretraining.train_or_eval(config)
    return config, metrics


def test_model_dir_is_self_contained(trained):
    config, _ = trained
    d = config.model_dir
    saved = json.load(open(os.path.join(d, model_dir_lib.PRETRAIN_CONFIG_FILE)))
    assert saved["num_train_steps"] == 10 and saved["model_dir"] == d
    bert = json.load(open(os.path.join(d, "bert_config.json")))
    assert {"vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
            "intermediate_size", "hidden_act", "max_position_embeddings",
            "type_vocab_size"} <= set(bert)
    assert bert["hidden_size"] == 32
    assert json.load(open(os.path.join(d, "generator_config.json")))["hidden_size"] == 16
    assert open(os.path.join(d, "vocab.txt")).read() == open(config.vocab_file).read()
    assert not os.path.exists(os.path.join(d, ".run.lock"))
    scalars = tu.read_scalars(d)
    # One point per block of steps; the first block is one step.
    assert [s for s, _ in scalars["train/loss"]] == [1, 2, 4, 5, 7, 8, 10]
    assert {"train/learning_rate", "train/global_norm", "train/examples_per_sec",
            "train/masked_lm_accuracy", "train/disc_loss", "eval/disc_auc"} <= set(scalars)


def test_checkpoint_keys_are_the_official_names(trained):
    config, _ = trained
    state = tf.train.get_checkpoint_state(config.model_dir)
    assert [os.path.basename(p) for p in state.all_model_checkpoint_paths] == \
        ["model.ckpt-8", "model.ckpt-10"]  # keep_checkpoint_max = 2
    shapes = dict(tf.train.list_variables(config.model_dir))
    for name in ["electra/encoder/layer_0/attention/self/query/kernel",
                 "electra/embeddings/word_embeddings", "generator/encoder/layer_1/output/dense/bias",
                 "generator_predictions/output_bias", "discriminator_predictions/dense_1/kernel",
                 "global_step", "electra/embeddings/word_embeddings/adam_m",
                 "electra/embeddings/word_embeddings/adam_v",
                 "pretrain_state/input_position"]:
        assert name in shapes, name
    assert [n for n in shapes if n.endswith("word_embeddings")] == \
        ["electra/embeddings/word_embeddings"]
    reader = tf.train.load_checkpoint(config.model_dir)
    assert reader.get_tensor("global_step") == 10
    assert reader.get_variable_to_dtype_map()["electra/embeddings/word_embeddings"] == tf.float32


def test_eval_results_written_as_json_and_text(trained):
    config, metrics = trained
    expected = {"masked_lm_accuracy", "masked_lm_loss", "sampled_masked_lm_accuracy",
                "disc_loss", "disc_auc", "disc_accuracy", "disc_precision", "disc_recall", "loss"}
    assert expected <= set(metrics)
    results = json.load(open(config.results_json))
    assert results["global_step"] == 10 and expected <= set(results)
    text = open(config.results_txt).read()
    assert text.startswith("eval at step 10") and "disc_auc = " in text
    history = json.load(open(os.path.join(os.path.dirname(config.results_json),
                                          evaluation.HISTORY_FILE)))
    assert [h["global_step"] for h in history] == [5, 10]
    # Each eval carries the run's health (pretrain/health.py): {state: step it began}.
    assert all(isinstance(h["health"], dict) for h in history)
    assert results["health"] == history[-1]["health"] and "\nhealth = " in text


def test_rerun_is_a_no_op_and_incompatible_resume_is_refused(trained, caplog):
    config, _ = trained
    before = checkpoint.read_all(config.model_dir)
    caplog.set_level("INFO")
    run_pretraining.train_or_eval(_config(config.data_dir, learning_rate=1e-3))
    assert "already trained" in caplog.text and "learning_rate" in caplog.text
    after = checkpoint.read_all(config.model_dir)
    assert all(np.array_equal(before[k], after[k]) for k in before)
    bigger = fx.tiny_hparams()["model_hparam_overrides"] | {"hidden_size": 64}
    with pytest.raises(run_setup.IncompatibleResumeError, match="hidden_size"):
        run_pretraining.train_or_eval(_config(config.data_dir, model_hparam_overrides=bigger))


def test_vocab_size_must_match_the_vocab_file(trained):
    config, _ = trained
    with pytest.raises(HParamError, match='"vocab_size": 32'):
        run_pretraining.train_or_eval(_config(config.data_dir, name="other", vocab_size=40))


def test_second_run_on_a_locked_model_dir_is_refused(trained):
    config, _ = trained
    with tu.RunLock(config.model_dir) as lock:
        with open(lock.path, "w") as f:
            json.dump({"pid": os.getppid(), "host": lock.host}, f)
        with pytest.raises(tu.RunLockError, match="in use"):
            run_pretraining.train_or_eval(_config(config.data_dir, num_train_steps=12))
        with open(lock.path, "w") as f:
            json.dump({"pid": os.getpid(), "host": lock.host}, f)


def test_init_checkpoint_loads_weights_with_fresh_optimizer_state(trained):
    config, _ = trained
    source = checkpoint.read_all(config.model_dir)
    trainer = Trainer(_config(config.data_dir, name="continued",
                              init_checkpoint=config.model_dir), SPECIAL)
    report = trainer.init_from(config.model_dir)
    assert not report.missing
    assert trainer.global_step == 0
    for name, var in trainer.model_vars.items():
        np.testing.assert_array_equal(var.numpy(), source[name])
        assert not trainer.optimizer.get_slot(var, "adam_m").numpy().any()
    trainer.init_from(config.model_dir, keep_step=True)
    assert trainer.global_step == 10


def test_non_finite_loss_stops_with_the_step_and_no_update(trained, tmp_path):
    config, _ = trained
    cfg = _config(config.data_dir, name="nan", model_dir=str(tmp_path / "nan"))
    trainer = Trainer(cfg, SPECIAL)
    files = input_pipeline.find_files(cfg.pretrain_tfrecords)
    bias = trainer.model_vars["discriminator_predictions/dense_1/bias"]
    bias.assign([math.nan])
    kernel = trainer.model_vars["electra/encoder/layer_0/attention/self/query/kernel"]
    before = kernel.numpy()
    with pytest.raises(tu.NonFiniteError, match="step 1 ") as info:
        loop.train(cfg, trainer, files, chief=True)
    assert info.value.step == 1 and "loss" in info.value.names
    assert trainer.global_step == 0
    np.testing.assert_array_equal(kernel.numpy(), before)
    assert checkpoint.latest_valid(cfg.model_dir) is None  # nothing saved after the fault


def test_replica_batches_of_unknown_size_reach_the_model_with_their_known_size(trained):
    """A distributed dataset can hand each replica batches of unknown size (those of
    MultiWorkerMirroredStrategy do); the trainer gives them the size every batch has, so the
    encoder's small blocks run as graph ops instead of one XLA compile per block."""
    config, _ = trained
    trainer = Trainer(config, SPECIAL)
    shapes = []

    @tf.function(input_signature=[{k: tf.TensorSpec([None, fx.SEQ_LEN], tf.int32)
                                   for k in ("input_ids", "input_mask", "segment_ids")}])
    def masked_ids(features):
        rng = rng_lib.ExampleRng(config.seed, tf.constant(0, tf.int64), tf.constant(0, tf.int64))
        masked, _ = trainer._masked_inputs(features, rng, trainer.per_replica_batch)
        shapes.append(masked.input_ids.shape.as_list())
        return masked.input_ids

    features = {k: tf.ones([config.train_batch_size, fx.SEQ_LEN], tf.int32)
                for k in ("input_ids", "input_mask", "segment_ids")}
    assert masked_ids(features).shape == [config.train_batch_size, fx.SEQ_LEN]
    assert shapes == [[config.train_batch_size, fx.SEQ_LEN]]
    with pytest.raises(tf.errors.InvalidArgumentError):  # a batch of another size is refused
        masked_ids({k: v[:3] for k, v in features.items()})


def _one_step_weights(config, trainer=None):
    trainer = trainer or Trainer(config, SPECIAL)
    files = input_pipeline.find_files(config.pretrain_tfrecords)
    result = trainer.train_steps(trainer.train_iterator(files.train), 2)
    assert result.finite and result.steps_applied == 2
    return result, {k: v.numpy() for k, v in trainer.model_vars.items()}


def test_gradient_accumulation_matches_the_full_batch(trained):
    config, _ = trained
    overrides = dict(model_hparam_overrides=fx.tiny_hparams()["model_hparam_overrides"] | NO_DROPOUT,
                     adam_bias_correction=False, lr_decay_after_warmup=False)
    full, full_weights = _one_step_weights(_config(config.data_dir, **overrides))
    acc, acc_weights = _one_step_weights(
        _config(config.data_dir, gradient_accumulation_steps=4, **overrides))
    assert acc.metrics["loss"] == pytest.approx(full.metrics["loss"], rel=1e-5)
    assert acc.metrics["global_norm"] == pytest.approx(full.metrics["global_norm"], rel=1e-4)
    for name in full_weights:
        np.testing.assert_allclose(acc_weights[name], full_weights[name], atol=1e-5, err_msg=name)


def test_float16_uses_dynamic_loss_scaling_and_skips_overflows(trained):
    config, _ = trained
    cfg = _config(config.data_dir, compute_dtype="float16")
    trainer = Trainer(cfg, SPECIAL)
    assert trainer.loss_scale.numpy() == 2.0 ** 15
    files = input_pipeline.find_files(cfg.pretrain_tfrecords)
    iterator = trainer.train_iterator(files.train)
    kernel = trainer.model_vars["electra/encoder/layer_0/attention/self/query/kernel"]
    before = kernel.numpy()
    # The first steps overflow float16 at scale 2^15 (loss weight 50): each is skipped and
    # halves the scale, until the gradients fit and updates start.
    result = trainer.train_steps(iterator, 8)
    skipped = result.steps_run - result.steps_applied
    assert result.finite and result.steps_run == 8 and 1 <= result.steps_applied
    assert trainer.global_step == result.steps_applied
    assert trainer.loss_scale.numpy() == 2.0 ** (15 - skipped)
    assert math.isfinite(result.metrics["loss"]) and not np.array_equal(kernel.numpy(), before)
    assert all(v.dtype == tf.float32 for v in trainer.model_vars.values())
    # An overflowing scale: the step is skipped (weights and step unchanged), the scale halves.
    trainer.loss_scale.assign(1e38)
    before, step = kernel.numpy(), trainer.global_step
    skipped = trainer.train_steps(iterator, 1)
    assert skipped.finite and skipped.steps_run == 1 and skipped.steps_applied == 0
    assert trainer.global_step == step and trainer.loss_scale.numpy() == pytest.approx(5e37)
    np.testing.assert_array_equal(kernel.numpy(), before)


# -- the health checks every run makes from its training batches (pretrain/training_health.py) --


def test_a_run_with_default_health_hparams_is_flagged_from_its_training_batches(trained, caplog):
    """Without do_eval or eval_every_steps (their defaults), a run whose discriminator learns
    to call every token replaced (electra_15 on the toy language, tests/test_health_runs.py) is
    flagged from the training batches after warm-up + 20 steps: in the log, with its advice,
    and in TensorBoard; no results file is written (those stay do_eval's)."""
    config, _ = trained
    cfg = _config(config.data_dir, "flagged", electra_15=True, num_warmup_steps=0,
                  num_train_steps=30, iterations_per_loop=10, save_checkpoints_steps=30)
    assert (cfg.health_every_steps, cfg.do_eval, cfg.eval_every_steps) == (200, False, 0)
    with caplog.at_level("INFO"):
        run_pretraining.train_or_eval(cfg)
    assert "health: disc_all_replaced since step 30 (read off the training batches of steps " \
           "21-30)" in caplog.text and "Try: electra_15 false" in caplog.text
    assert "health at the end of training (step 30): disc_all_replaced since step 30" in \
        caplog.text
    scalars = tu.read_scalars(cfg.model_dir)
    assert scalars["health/disc_all_replaced"] == [(30, 1.0)]
    assert scalars["train/disc_positive_rate"][0][1] > 0.9
    assert not os.path.exists(os.path.dirname(cfg.results_json))


def test_the_health_counts_change_nothing_the_step_computes(trained):
    """The counts ride in the step's metric vector: the same losses, norms and weights, bit for
    bit, as a step without them (health_every_steps 0), and no random numbers drawn."""
    config, _ = trained
    plain, plain_weights = _one_step_weights(_config(config.data_dir, health_every_steps=0))
    checked, checked_weights = _one_step_weights(_config(config.data_dir))
    assert plain.health_sums is None and checked.health_sums is not None
    assert checked.health_sums[0] > 0  # real tokens counted
    assert checked.metrics == plain.metrics
    for name, value in plain_weights.items():
        np.testing.assert_array_equal(checked_weights[name], value, err_msg=name)
