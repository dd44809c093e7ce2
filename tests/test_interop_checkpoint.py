"""Official (TF1) checkpoints in: a checkpoint written by tf.compat.v1 with the official variable
names initialises fine-tuning; its extra tensors are summarised, missing encoder ones listed. A
directory laid out as a release download brings its own vocabulary; any other is refused."""
import json
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf

import configure_finetuning
import configure_pretraining
import run_finetuning
from finetune import finetuning_model
from finetune import task_builder
from finetune import trainer
from util import checkpoint
from util.hparams import HParamError

from tests.test_finetune_data import VOCAB, make_config, write_fixtures

TINY = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
        "intermediate_size": 64, "max_position_embeddings": 32}
SIZES = {"V": 23, "E": 16, "H": 32, "F": 64, "P": 32, "T": 2}  # 23 = the fixture vocabulary

# The official ELECTRA discriminator variables (BERT's scopes + embeddings_project), {i} = layer.
OFFICIAL_ENCODER = """
electra/embeddings/word_embeddings                       V E
electra/embeddings/position_embeddings                   P E
electra/embeddings/token_type_embeddings                 T E
electra/embeddings/LayerNorm/gamma                       E
electra/embeddings/LayerNorm/beta                        E
electra/embeddings_project/kernel                        E H
electra/embeddings_project/bias                          H
"""
OFFICIAL_LAYER = """
electra/encoder/layer_{i}/attention/self/query/kernel    H H
electra/encoder/layer_{i}/attention/self/query/bias      H
electra/encoder/layer_{i}/attention/self/key/kernel      H H
electra/encoder/layer_{i}/attention/self/key/bias        H
electra/encoder/layer_{i}/attention/self/value/kernel    H H
electra/encoder/layer_{i}/attention/self/value/bias      H
electra/encoder/layer_{i}/attention/output/dense/kernel  H H
electra/encoder/layer_{i}/attention/output/dense/bias    H
electra/encoder/layer_{i}/attention/output/LayerNorm/gamma  H
electra/encoder/layer_{i}/attention/output/LayerNorm/beta   H
electra/encoder/layer_{i}/intermediate/dense/kernel      H F
electra/encoder/layer_{i}/intermediate/dense/bias        F
electra/encoder/layer_{i}/output/dense/kernel            F H
electra/encoder/layer_{i}/output/dense/bias              H
electra/encoder/layer_{i}/output/LayerNorm/gamma         H
electra/encoder/layer_{i}/output/LayerNorm/beta          H
"""
# What else a pre-training checkpoint of the official release holds.
OFFICIAL_EXTRAS = """
generator/encoder/layer_0/attention/self/query/kernel    E E
generator_predictions/output_bias                        V
discriminator_predictions/dense/kernel                   H H
discriminator_predictions/dense_1/kernel                 H 1
"""


def official_shapes(text: str) -> dict[str, list[int]]:
    sizes = dict(SIZES, **{"1": 1})
    out = {}
    for line in filter(str.strip, text.splitlines()):
        name, *dims = line.split()
        out[name] = [sizes[d] for d in dims]
    return out


def encoder_shapes() -> dict[str, list[int]]:
    text = OFFICIAL_ENCODER + "".join(OFFICIAL_LAYER.format(i=i) for i in range(2))
    return official_shapes(text)


def write_tf1_checkpoint(directory: str, drop: str | None = None,
                         state_path: str | None = None) -> dict[str, np.ndarray]:
    """Graph-mode tf.compat.v1 variables under the official names, saved by a v1 Saver.

    Includes what the official run_pretraining.py leaves in a checkpoint besides the encoder:
    global_step, AdamWeightDecayOptimizer slots (<var>/adam_m, <var>/adam_v), the generator and
    both heads. Returns the encoder values.
    """
    rng = np.random.default_rng(0)
    encoder = {n: rng.normal(0, 0.1, s).astype(np.float32) for n, s in encoder_shapes().items()
               if n != drop}
    extras = {n: rng.normal(0, 0.1, s).astype(np.float32)
              for n, s in official_shapes(OFFICIAL_EXTRAS).items()}
    with tf.Graph().as_default():
        v1 = tf.compat.v1
        variables = [v1.get_variable(n, initializer=v) for n, v in {**encoder, **extras}.items()]
        for var in list(variables):  # the optimizer's slots, named as the official optimizer does
            name = var.op.name
            variables += [v1.get_variable(name + "/adam_m", initializer=tf.zeros_like(var)),
                          v1.get_variable(name + "/adam_v", initializer=tf.zeros_like(var))]
        global_step = v1.train.get_or_create_global_step()
        saver = v1.train.Saver()
        with v1.Session() as sess:
            sess.run(v1.global_variables_initializer())
            sess.run(global_step.assign(1000))
            saver.save(sess, os.path.join(directory, "model.ckpt"), global_step=1000)
    if state_path is not None:  # a release downloaded from elsewhere: stale state file
        with open(os.path.join(directory, "checkpoint"), "w") as f:
            f.write(f'model_checkpoint_path: "{state_path}"\n')
    return encoder


def test_official_names_are_the_model_names(tmp_path):
    config = make_config(tmp_path, ["sst"], model_hparam_overrides=TINY, embedding_size=16)
    model = finetuning_model.FinetuningModel(config, task_builder.get_tasks(config))
    ours = {n: v.shape.as_list() for n, v in model.encoder_variables().items()}
    assert ours == encoder_shapes()


def test_tf1_checkpoint_initialises_fine_tuning(tmp_path, caplog):
    release = tmp_path / "electra_release"
    release.mkdir()
    # The state file names a path on the machine that wrote it; the .index files still count.
    encoder = write_tf1_checkpoint(str(release), state_path="gs://bucket/electra/model.ckpt-1000")
    reader = tf.train.load_checkpoint(str(release / "model.ckpt-1000"))
    assert reader.has_tensor("electra/encoder/layer_1/output/dense/kernel/adam_m")
    assert int(reader.get_tensor("global_step")) == 1000

    write_fixtures(tmp_path, tasks={"sst"})
    config = make_config(tmp_path, ["sst"], model_hparam_overrides=TINY, embedding_size=16,
                         init_checkpoint=str(release), num_train_epochs=3.0, do_eval=False,
                         train_batch_size=2)
    runner = trainer.ModelRunner(config, task_builder.get_tasks(config),
                                 run_finetuning.preprocessing.Preprocessor(
                                     config, task_builder.get_tasks(config)))
    with caplog.at_level("INFO"):
        assert runner.initialize() == "pretrained"
    for name, var in runner.model.encoder_variables().items():
        np.testing.assert_array_equal(var.numpy(), encoder[name], err_msg=name)
    # One summary line for everything ignored: slots, global_step, generator, heads.
    n_slots = 2 * (len(encoder) + 4)
    line = [r.getMessage() for r in caplog.records if "ignored" in r.getMessage()]
    assert line == [f"restored {len(encoder)} encoder variables from {release}/model.ckpt-1000; "
                    f"ignored {n_slots + 5} other tensors (discriminator_predictions: 2, "
                    f"generator: 1, generator_predictions: 1, global_step: 1, "
                    f"optimizer slots: {n_slots})"]
    runner.train()  # and it fine-tunes from there (the first step has learning rate 0)
    assert runner.global_step == 3
    tensors = checkpoint.read_all(trainer.trial_dir(config, 1))
    assert not np.array_equal(tensors["electra/embeddings/word_embeddings"],
                              encoder["electra/embeddings/word_embeddings"])


def test_missing_encoder_variables_are_listed(tmp_path):
    missing = "electra/encoder/layer_1/attention/output/LayerNorm/gamma"
    write_tf1_checkpoint(str(tmp_path), drop=missing)
    config = make_config(tmp_path, ["sst"], model_hparam_overrides=TINY, embedding_size=16)
    model = finetuning_model.FinetuningModel(config, task_builder.get_tasks(config))
    with pytest.raises(ValueError, match=f"lacks 1 variables the model needs: {missing}"):
        model.restore_pretrained(str(tmp_path))


# -- a release download: electra_small/ with checkpoint, electra_small.{index,data-*}, vocab.txt --


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    """electra_small/ as the release zip unpacks (tiny sizes, official names); returns its path
    and the encoder values. Shared by the tests below: copy it before changing it."""
    directory = tmp_path_factory.mktemp("download") / "electra_small"
    directory.mkdir()
    encoder = write_tf1_checkpoint(str(directory))
    for path in directory.iterdir():
        if path.name.startswith("model.ckpt-1000.") and not path.name.endswith(".meta"):
            path.rename(directory / path.name.replace("model.ckpt-1000", "electra_small"))
        else:
            path.unlink()
    (directory / "checkpoint").write_text('model_checkpoint_path: "electra_small"\n'
                                          'all_model_checkpoint_paths: "electra_small"\n')
    (directory / "vocab.txt").write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
    assert sorted(p.name for p in directory.iterdir()) == [
        "checkpoint", "electra_small.data-00000-of-00001", "electra_small.index", "vocab.txt"]
    return directory, encoder


def other_vocab(path) -> str:
    """The fixture vocabulary with two tokens swapped: same size, other ids."""
    tokens = list(VOCAB)
    tokens[5], tokens[6] = tokens[6], tokens[5]
    path.write_text("\n".join(tokens) + "\n", encoding="utf-8")
    return str(path)


def interop_hparams(**more) -> dict:
    """docs/INTEROP.md's hparams, plus the tiny architecture the fixture checkpoint has."""
    return dict({"model_size": "small", "task_names": ["sst"], "init_checkpoint": "electra_small",
                 "model_hparam_overrides": TINY, "embedding_size": 16, "vocab_size": len(VOCAB),
                 "max_seq_length": 16}, **more)


def test_interop_command_on_a_release_download(release, tmp_path, monkeypatch):
    """INTEROP.md's command as written, from the directory holding electra_small/; DATA has no
    vocab.txt: the download's is used and its encoder weights are loaded."""
    source, encoder = release
    shutil.copytree(source, tmp_path / "electra_small")
    write_fixtures(tmp_path / "DATA", tasks={"sst"})
    monkeypatch.chdir(tmp_path)
    # One step (2 examples, batch 2) at the first step's learning rate, 0: weights stay as loaded.
    hparams = interop_hparams(train_batch_size=2, num_train_epochs=1.0, do_eval=False)
    assert run_finetuning.main(["--data-dir", "DATA", "--model-name", "small",
                                "--hparams", json.dumps(hparams)]) == 0
    trial = tmp_path / "DATA" / "models" / "small" / "finetuning_models" / "sst_model_1"
    settings = json.loads((trial / trainer.SETTINGS_FILE).read_text())
    assert settings["init"] == "pretrained"
    assert (trial / "vocab.txt").read_bytes() == (source / "vocab.txt").read_bytes()
    tensors = checkpoint.read_all(str(trial))
    assert tensors["global_step"] == 1
    for name, value in encoder.items():
        np.testing.assert_array_equal(tensors[name], value, err_msg=name)


def finetune_config(data_dir, **hparams):
    return configure_finetuning.FinetuningConfig.from_hparams("small", str(data_dir),
                                                              interop_hparams(**hparams))


def test_the_vocabulary_beside_a_checkpoint_prefix_or_dir_is_the_default(release, tmp_path):
    source, _ = release
    for init in (source, source / "electra_small"):
        config = finetune_config(tmp_path, init_checkpoint=str(init))
        assert config.vocab_file == str(source / "vocab.txt")
    pretraining = configure_pretraining.PretrainingConfig.from_hparams(
        "small", str(tmp_path), {"init_checkpoint": str(source)})
    assert pretraining.vocab_file == str(source / "vocab.txt")
    # The same vocabulary elsewhere (DATA/vocab.txt of the official setup) is no conflict.
    shutil.copy(source / "vocab.txt", tmp_path / "vocab.txt")
    assert finetune_config(tmp_path, init_checkpoint=str(source)).vocab_file == str(
        source / "vocab.txt")


def test_the_official_layout_data_models_name(release, tmp_path):
    """The release's setup: the download unzipped under DATA/models/, no init_checkpoint; the
    vocabulary in the model dir, or (moved out) in DATA/vocab.txt."""
    source, _ = release
    model_dir = tmp_path / "models" / "electra_small"
    shutil.copytree(source, model_dir)
    hparams = interop_hparams()
    del hparams["init_checkpoint"]

    def config():
        return configure_finetuning.FinetuningConfig.from_hparams(
            "electra_small", str(tmp_path), hparams)
    assert config().init_checkpoint == str(model_dir)
    assert config().vocab_file == str(model_dir / "vocab.txt")
    (model_dir / "vocab.txt").rename(tmp_path / "vocab.txt")
    assert config().vocab_file == str(tmp_path / "vocab.txt")
    assert task_builder.build_tokenizer(config()).vocab_size == len(VOCAB)


def test_a_vocabulary_other_than_the_checkpoints_is_refused_naming_both(release, tmp_path):
    source, _ = release
    own, other = str(source / "vocab.txt"), other_vocab(tmp_path / "other.txt")
    with pytest.raises(HParamError) as set_by_user:
        finetune_config(tmp_path, init_checkpoint=str(source), vocab_file=other)
    assert f"hparam 'vocab_file' {other} is not the vocabulary" in str(set_by_user.value)
    assert f"({own}, other content" in str(set_by_user.value)
    assert f"Leave vocab_file unset to use {own}" in str(set_by_user.value)
    # Unset, the data dir's differing vocab.txt is named; setting vocab_file is the way out.
    other_vocab(tmp_path / "vocab.txt")
    for make in (lambda **h: finetune_config(tmp_path, init_checkpoint=str(source), **h),
                 lambda **h: configure_pretraining.PretrainingConfig.from_hparams(
                     "small", str(tmp_path), dict(init_checkpoint=str(source), **h))):
        with pytest.raises(HParamError) as by_default:
            make()
        message = str(by_default.value)
        assert message.startswith(f"{tmp_path / 'vocab.txt'} is not the vocabulary the "
                                  f"pre-trained model was trained with ({own}, other content)")
        assert f'Set "vocab_file": "{own}" to use the checkpoint\'s' in message
        assert make(vocab_file=own).vocab_file == own


def test_fine_tuning_reads_text_with_the_case_the_model_was_trained_with(release, tmp_path):
    """A release carries no pretrain_config.json: lower-cased, as the uncased releases need. A
    model of ours records do_lower_case there; a contradicting hparam is refused naming it."""
    source, _ = release
    assert finetune_config(tmp_path, init_checkpoint=str(source)).do_lower_case is True
    assert finetune_config(tmp_path, init_checkpoint=str(source),
                           do_lower_case=False).do_lower_case is False
    cased = tmp_path / "cased"
    shutil.copytree(source, cased)
    (cased / "pretrain_config.json").write_text(json.dumps({"do_lower_case": False}))
    for init in (cased, cased / "electra_small"):
        assert finetune_config(tmp_path, init_checkpoint=str(init)).do_lower_case is False
    with pytest.raises(HParamError) as contradicted:
        finetune_config(tmp_path, init_checkpoint=str(cased), do_lower_case=True)
    assert str(contradicted.value).startswith(
        "hparam do_lower_case is true but the pre-trained model was trained with do_lower_case "
        f"false ({cased / 'pretrain_config.json'})")


def test_a_vocabulary_of_another_size_than_the_table_is_refused(release, tmp_path):
    """A checkpoint without a vocabulary beside it (the official layout: DATA/vocab.txt)."""
    source, _ = release
    bare = tmp_path / "bare"
    shutil.copytree(source, bare)
    (bare / "vocab.txt").unlink()
    (tmp_path / "vocab.txt").write_text("\n".join(VOCAB[:-1]) + "\n", encoding="utf-8")
    config = finetune_config(tmp_path, init_checkpoint=str(bare))
    assert config.vocab_file == str(tmp_path / "vocab.txt")
    with pytest.raises(HParamError, match=(
            f"vocabulary {tmp_path / 'vocab.txt'} has {len(VOCAB) - 1} tokens but the token "
            f"embedding table of init_checkpoint {bare} .* has {len(VOCAB)} rows")):
        task_builder.build_tokenizer(config)
