"""SavedModel export of fine-tuned models: the serving signature, reloading, equality with the
live model on the same batches, atomic output, refusals."""
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
        name: (tf.int32, [None, None]) for name in ("input_ids", "input_mask", "segment_ids")}
    assert set(signature.structured_outputs) == {
        f"{task}_{out}" for task in ("cola", "sst")
        for out in ("logits", "probabilities", "predictions")}


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
            np.testing.assert_allclose(served[f"{task.name}_logits"].numpy(),
                                       live[task.name]["logits"].numpy(), rtol=1e-6, atol=1e-6)
            np.testing.assert_array_equal(served[f"{task.name}_predictions"].numpy(),
                                          live[task.name]["predictions"].numpy())
            probs = served[f"{task.name}_probabilities"].numpy()
            np.testing.assert_allclose(probs.sum(-1), 1.0, rtol=1e-6)


def test_shorter_sequences_than_max_seq_length(exported):
    config, trial, output = exported
    loaded = tf.saved_model.load(output)
    md = model_dir_lib.read_model_dir(trial, vocab_file=config.vocab_file)
    _, tasks, model = serving.load_finetuned(md)
    ids = tf.constant([[2, 5, 7, 9, 3, 0], [2, 6, 3, 8, 10, 3]], tf.int32)
    mask = tf.cast(ids > 0, tf.int32)
    segments = tf.constant([[0, 0, 0, 0, 0, 0], [0, 0, 0, 1, 1, 1]], tf.int32)
    served = loaded.serve(ids, mask, segments)  # the module's function, as in the signature
    live = serving.ServingModule(model, tasks, config.max_seq_length).serve(ids, mask, segments)
    assert sorted(served) == sorted(live)
    for key in served:
        np.testing.assert_allclose(served[key].numpy(), live[key].numpy(), rtol=1e-6, atol=1e-6)


def test_single_task_keys_are_bare(tmp_path):
    config = make_config(tmp_path, ["sts"], model_hparam_overrides=TINY, embedding_size=16)
    tasks = task_builder.get_tasks(config)
    module = serving.ServingModule(finetuning_model.FinetuningModel(config, tasks), tasks,
                                   config.max_seq_length)
    ids = tf.constant([[2, 5, 3, 0]], tf.int32)
    out = module.serve(ids, tf.cast(ids > 0, tf.int32), tf.zeros_like(ids))
    assert {k: v.shape.as_list() for k, v in out.items()} == {"predictions": [1]}


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
