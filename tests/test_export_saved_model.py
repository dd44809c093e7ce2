"""SavedModel export of fine-tuned models (classifier, tagger, QA): the serving signature,
reloading, equality with the live model on the same batches, atomic output, refusals."""
import json
import os

import numpy as np
import pytest
import tensorflow as tf

import export_model
import run_finetuning
from finetune import finetuning_model
from finetune import preprocessing
from finetune import serving
from finetune import task_builder
from finetune import trainer
from model import model_dir as model_dir_lib
from util import checkpoint

from tests.test_finetune_data import make_config
from tests.test_run_finetuning import fixture_config

TINY = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
        "intermediate_size": 64, "max_position_embeddings": 32}


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """A two-task (cola, sst) trial fine-tuned briefly, and its SavedModel."""
    root = tmp_path_factory.mktemp("finetuned")
    config = fixture_config(root, num_train_epochs=1.0, do_eval=False)
    run_finetuning.run_finetuning(config)
    trial = trainer.trial_dir(config, 1)
    output = str(root / "served")
    assert export_model.main(["--model-dir", trial, "--format", "saved_model", "--output", output,
                              "--vocab-file", config.vocab_file]) == 0
    return config, trial, output


def test_signature_and_outputs(exported):
    _, _, output = exported
    loaded = tf.saved_model.load(output)
    signature = loaded.signatures["serving_default"]
    _, inputs = signature.structured_input_signature
    assert {k: (v.dtype, v.shape.as_list()) for k, v in inputs.items()} == {
        name: (tf.int32, [None, 16]) for name in ("input_ids", "input_mask", "segment_ids")}
    assert set(signature.structured_outputs) == {
        f"{task}_{out}" for task in ("cola", "sst")
        for out in ("logits", "probabilities", "predictions", "label")}
    assert {t: v.numpy().tolist() for t, v in loaded.label_names.items()} == {
        "cola": [b"0", b"1"], "sst": [b"0", b"1"]}


def test_saved_model_equals_the_live_model_on_dev_batches(exported):
    config, trial, output = exported
    signature = tf.saved_model.load(output).signatures["serving_default"]
    # The live model: the trial's weights in a FinetuningModel, run as evaluation runs it.
    tasks = task_builder.get_tasks(config)
    runner = trainer.ModelRunner(config.__class__.from_hparams(
        config.model_name, config.data_dir, dict(config.to_dict(), do_train=False)),
        tasks, preprocessing.Preprocessor(config, tasks))
    runner.initialize()
    for task in tasks:
        data = runner.preprocessor.prepare_predict([task], "dev")
        for batch in runner.preprocessor.predict_dataset(data):
            _, live = runner.model(batch, training=False)
            served = signature(input_ids=batch["input_ids"], input_mask=batch["input_mask"],
                               segment_ids=batch["segment_ids"])
            # Real rows (the batch's padding rows, all mask 0, are dropped by evaluation; the
            # live model packs real tokens only, the SavedModel keeps the padded layout).
            real = batch["input_mask"].numpy().any(1)
            assert real.any()
            np.testing.assert_allclose(served[f"{task.name}_logits"].numpy()[real],
                                       live[task.name]["logits"].numpy()[real], rtol=1e-6,
                                       atol=1e-6)
            np.testing.assert_array_equal(served[f"{task.name}_predictions"].numpy()[real],
                                          live[task.name]["predictions"].numpy()[real])
            probs = served[f"{task.name}_probabilities"].numpy()
            np.testing.assert_allclose(probs.sum(-1), 1.0, rtol=1e-6)


def test_rows_are_padded_to_max_seq_length(exported):
    config, _, output = exported
    loaded = tf.saved_model.load(output)
    ids = tf.constant([[2, 5, 7, 9, 3, 0]], tf.int32)
    with pytest.raises((ValueError, TypeError)):
        loaded.serve(ids, tf.cast(ids > 0, tf.int32), tf.zeros_like(ids))
    padded = tf.pad(ids, [[0, 0], [0, config.max_seq_length - 6]])
    out = loaded.serve(padded, tf.cast(padded > 0, tf.int32), tf.zeros_like(padded))
    assert out["sst_logits"].shape == [1, 2]


def test_tagger_and_qa_heads_export_too(tmp_path):
    """A (random) trial with classification, tagging and QA heads round-trips through export."""
    tiny = dict(TINY, max_position_embeddings=32)
    config = make_config(tmp_path, ["sst", "chunk", "squad"], model_hparam_overrides=tiny,
                         embedding_size=16, max_seq_length=32)
    tasks = task_builder.get_tasks(config)
    model = finetuning_model.FinetuningModel(config, tasks, seed=5)
    trial = tmp_path / "trial"
    checkpoint.CheckpointManager(str(trial)).save(
        {n: v.numpy() for n, v in checkpoint.by_name(model.variables).items()}, 0)
    with open(trial / "finetune_config.json", "w") as f:
        json.dump({"bert_config": model.bert_config.to_dict(),
                   "training_settings": trainer.training_settings(config)}, f)
    output = str(tmp_path / "served")
    assert export_model.main(["--model-dir", str(trial), "--format", "saved_model", "--output",
                              output, "--vocab-file", config.vocab_file]) == 0
    loaded = tf.saved_model.load(output).signatures["serving_default"]
    rng = np.random.default_rng(0)
    ids = tf.constant(rng.integers(5, 20, [3, 32]), tf.int32)
    segments = tf.constant(np.repeat([[0] * 12 + [1] * 20], 3, axis=0), tf.int32)
    served = loaded(input_ids=ids, input_mask=tf.ones_like(ids), segment_ids=segments)
    live = serving.ServingModule(model, tasks, 32).serve(ids, tf.ones_like(ids), segments)
    assert sorted(served) == sorted(live)
    assert {"sst_probabilities", "chunk_predictions", "squad_start_logits",
            "squad_end_logits"} <= set(served)
    assert served["chunk_predictions"].shape == [3, 32]
    chunk = tasks[1]
    np.testing.assert_array_equal(served["chunk_tags"].numpy().astype(str), np.array(
        chunk.label_list)[served["chunk_predictions"].numpy()])
    assert "squad_label" not in served and "squad_tags" not in served
    # The tagger labels every token: its dense layer on each position's encoding.
    encoded = model.encoder(ids, tf.ones_like(ids), segments, training=False).sequence_output
    tagger = model.heads[1].dense
    np.testing.assert_array_equal(served["chunk_predictions"].numpy(),
                                  np.argmax(tagger(encoded).numpy(), -1))
    for key in served:
        if served[key].dtype == tf.string:
            np.testing.assert_array_equal(served[key].numpy(), live[key].numpy(), err_msg=key)
        else:
            np.testing.assert_allclose(served[key].numpy(), live[key].numpy(), rtol=1e-5,
                                       atol=1e-5, err_msg=key)


def test_single_task_keys_are_bare(tmp_path):
    config = make_config(tmp_path, ["sts"], model_hparam_overrides=TINY, embedding_size=16)
    tasks = task_builder.get_tasks(config)
    module = serving.ServingModule(finetuning_model.FinetuningModel(config, tasks), tasks,
                                   config.max_seq_length)
    ids = tf.constant([[2, 5, 3] + [0] * (config.max_seq_length - 3)], tf.int32)
    out = module.serve(ids, tf.cast(ids > 0, tf.int32), tf.zeros_like(ids))
    assert {k: v.shape.as_list() for k, v in out.items()} == {"predictions": [1], "score": [1]}
    # STS-B is trained on score / 5: `score` is in the task's units.
    np.testing.assert_allclose(out["score"].numpy(), out["predictions"].numpy() * 5.0, rtol=1e-6)


def test_refusals_and_atomic_replacement(exported, tmp_path):
    config, trial, output = exported
    # A pre-training dir has no task heads to serve.
    pretrained = tmp_path / "pretrained"
    pretrained.mkdir()
    with pytest.raises(ValueError, match="not a fine-tuning trial"):
        export_model.export_saved_model(
            model_dir_lib.ModelDir(str(pretrained), "pretrained", None, None, "", None, True, {},
                                   []), str(tmp_path / "out"))
    # An existing output is kept unless --overwrite; with it, replaced whole.
    args = ["--model-dir", trial, "--format", "saved_model", "--output", output,
            "--vocab-file", config.vocab_file]
    assert export_model.main(args) == 2
    marker = os.path.join(output, "stale.txt")
    open(marker, "w").close()
    assert export_model.main(args + ["--overwrite"]) == 0
    assert not os.path.exists(marker)
    assert "saved_model.pb" in os.listdir(output)
    parent = os.path.dirname(output)
    assert not [p for p in os.listdir(parent) if p.startswith(".served")]
