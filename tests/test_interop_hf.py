"""Hugging Face export and import without torch: names and shapes, config, round trips, errors.

The expected parameter lists are written out from transformers' modeling_electra.py
(ElectraEmbeddings, ElectraSelfAttention/SelfOutput/Intermediate/Output, ElectraModel's
embeddings_project, ElectraDiscriminatorPredictions, ElectraGeneratorPredictions +
generator_lm_head, ElectraClassificationHead), independently of model/hf_conversion.py.
Numerical agreement with the library itself is measured by tools/check_hf_equivalence.py.
"""
import json
import math
import os

import numpy as np
import pytest
from safetensors import numpy as st_numpy

import configure_finetuning
import export_model
import pretrain_fixtures as fx
from configure_pretraining import PretrainingConfig
from finetune import finetuning_model
from finetune import task_builder
from model import hf_conversion
from model import model_dir as model_dir_lib
from pretrain import masking
from pretrain.pretraining_model import PretrainingModel
from util import checkpoint

SPECIAL = masking.SpecialIds(pad=fx.PAD, cls=fx.CLS, sep=fx.SEP, mask=fx.MASK)
# Disc hidden 32, generator hidden 16, embeddings 24: both encoders have embeddings_project.
V, E, H, HG, F, FG, P, T, LAYERS = fx.VOCAB_SIZE, 24, 32, 16, 64, 64, 32, 2, 2

# One ElectraLayer, as modeling_electra.py names its parameters ({i}: layer index).
LAYER_PARAMS = """
electra.encoder.layer.{i}.attention.self.query.weight       H H
electra.encoder.layer.{i}.attention.self.query.bias         H
electra.encoder.layer.{i}.attention.self.key.weight         H H
electra.encoder.layer.{i}.attention.self.key.bias           H
electra.encoder.layer.{i}.attention.self.value.weight       H H
electra.encoder.layer.{i}.attention.self.value.bias         H
electra.encoder.layer.{i}.attention.output.dense.weight     H H
electra.encoder.layer.{i}.attention.output.dense.bias       H
electra.encoder.layer.{i}.attention.output.LayerNorm.weight H
electra.encoder.layer.{i}.attention.output.LayerNorm.bias   H
electra.encoder.layer.{i}.intermediate.dense.weight         F H
electra.encoder.layer.{i}.intermediate.dense.bias           F
electra.encoder.layer.{i}.output.dense.weight               H F
electra.encoder.layer.{i}.output.dense.bias                 H
electra.encoder.layer.{i}.output.LayerNorm.weight           H
electra.encoder.layer.{i}.output.LayerNorm.bias             H
"""
EMBEDDING_PARAMS = """
electra.embeddings.word_embeddings.weight        V E
electra.embeddings.position_embeddings.weight    P E
electra.embeddings.token_type_embeddings.weight  T E
electra.embeddings.LayerNorm.weight              E
electra.embeddings.LayerNorm.bias                E
electra.embeddings_project.weight                H E
electra.embeddings_project.bias                  H
"""
HEAD_PARAMS = {
    "discriminator": """
discriminator_predictions.dense.weight             H H
discriminator_predictions.dense.bias               H
discriminator_predictions.dense_prediction.weight  1 H
discriminator_predictions.dense_prediction.bias    1
""",
    "generator": """
generator_predictions.dense.weight      E H
generator_predictions.dense.bias        E
generator_predictions.LayerNorm.weight  E
generator_predictions.LayerNorm.bias    E
generator_lm_head.weight                V E
generator_lm_head.bias                  V
""",
    "classifier": """
classifier.dense.weight     H H
classifier.dense.bias       H
classifier.out_proj.weight  C H
classifier.out_proj.bias    C
""",
}


def documented_params(kind: str, hidden: int, ffn: int, num_labels: int = 2) -> dict:
    sizes = {"V": V, "E": E, "H": hidden, "F": ffn, "P": P, "T": T, "C": num_labels, "1": 1}
    text = EMBEDDING_PARAMS + "".join(LAYER_PARAMS.format(i=i) for i in range(LAYERS))
    text += HEAD_PARAMS[kind]
    params = {}
    for line in filter(str.strip, text.splitlines()):
        name, *dims = line.split()
        params[name] = tuple(sizes[d] for d in dims)
    return params


def pretrained_dir(root, **overrides) -> str:
    """A pre-training model dir (configs, vocab, checkpoint) with random non-trivial weights;
    `overrides`: pre-training hparams (e.g. embedding_sharing)."""
    hparams = fx.tiny_hparams(embedding_size=E, **overrides)
    config = PretrainingConfig.from_hparams("m", str(root), hparams)
    model = PretrainingModel(config, SPECIAL)
    rng = np.random.default_rng(0)
    tensors = {n: (v.numpy() + rng.normal(0, 0.1, v.shape)).astype(np.float32)
               for n, v in model.model_variables().items()}
    tensors["global_step"] = np.int64(7)
    tensors["electra/encoder/layer_0/output/dense/kernel/adam_m"] = np.zeros([F, H], np.float32)
    path = os.path.join(str(root), "models", "m")
    checkpoint.CheckpointManager(path).save(tensors, 7)
    with open(os.path.join(path, "bert_config.json"), "w") as f:
        f.write(model.disc_config.to_json_string())
    with open(os.path.join(path, "generator_config.json"), "w") as f:
        f.write(model.generator_config.to_json_string())
    fx.write_vocab(os.path.join(path, "vocab.txt"))
    return path


def trial_dir(root, source: str, labels: int = 3, task: str = "mnli") -> str:
    """A fine-tuning trial of `task` (mnli: 3 labels) on the encoder of `source`."""
    md = model_dir_lib.read_model_dir(source)
    tensors = {n: v for n, v in checkpoint.read_all(md.checkpoint).items()
               if n.startswith("electra/") and not n.endswith(("adam_m", "adam_v"))}
    rng = np.random.default_rng(1)
    head = f"task_specific/{task}/dense"
    tensors[f"{head}/kernel"] = rng.normal(0, 0.5, [H, labels]).astype(np.float32)
    tensors[f"{head}/bias"] = rng.normal(0, 0.5, [labels]).astype(np.float32)
    tensors[f"{head}/kernel/adam_m"] = np.zeros([H, labels], np.float32)
    tensors["global_step"] = np.int64(3)
    path = os.path.join(source, "finetuning_models", f"{task}_model_1")
    checkpoint.CheckpointManager(path).save(tensors, 3)
    with open(os.path.join(path, "finetune_config.json"), "w") as f:
        json.dump({"bert_config": md.bert_config.to_dict(), "init": "pretrained",
                   "training_settings": {"task_names": [task], "vocab_size": V,
                                         "max_seq_length": 16}}, f)
    return path


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    return pretrained_dir(tmp_path_factory.mktemp("pretrained"))


def read_export(directory):
    tensors = st_numpy.load_file(os.path.join(directory, "model.safetensors"))
    config = json.load(open(os.path.join(directory, "config.json")))
    return tensors, config


def test_exported_names_and_shapes_are_the_documented_ones(source, tmp_path):
    md = model_dir_lib.read_model_dir(source)
    export_model.export_huggingface(md, str(tmp_path / "disc"), "discriminator")
    export_model.export_huggingface(md, str(tmp_path / "gen"), "generator")
    tmd = model_dir_lib.read_model_dir(trial_dir(tmp_path, source),
                                       vocab_file=os.path.join(source, "vocab.txt"))
    export_model.export_huggingface(tmd, str(tmp_path / "cls"))  # trial dir: classifier
    for kind, hidden, ffn, where in (("discriminator", H, F, "disc"), ("generator", HG, FG, "gen"),
                                     ("classifier", H, F, "cls")):
        tensors, _ = read_export(tmp_path / where)
        got = {n: tuple(v.shape) for n, v in tensors.items()}
        assert got == documented_params(kind, hidden, ffn, num_labels=3), kind
        assert all(v.dtype == np.float32 for v in tensors.values())


def test_sentencepiece_model_exports_without_tokenizer_files_only_when_asked(source, tmp_path):
    from model import tokenization
    text = [" ".join(f"w{(i * 7 + k) % 27}" for k in range(8)) for i in range(200)]
    spm = tokenization.train_sentencepiece(text, str(tmp_path / "spm"), 30)
    md = model_dir_lib.read_model_dir(source, vocab_file=spm)
    with pytest.raises(ValueError, match=r"is a SentencePiece model.*--no-tokenizer"):
        export_model.export_huggingface(md, str(tmp_path / "disc"), "discriminator")
    assert not os.path.exists(tmp_path / "disc")
    export_model.export_huggingface(md, str(tmp_path / "disc"), "discriminator", tokenizer=False)
    assert sorted(os.listdir(tmp_path / "disc")) == ["config.json", "model.safetensors"]


def test_config_and_tokenizer_files(source, tmp_path):
    md = model_dir_lib.read_model_dir(source)
    export_model.export_huggingface(md, str(tmp_path / "disc"), "discriminator")
    _, config = read_export(tmp_path / "disc")
    assert config["architectures"] == ["ElectraForPreTraining"]
    assert config["model_type"] == "electra"
    # Our GELU is the exact erf form of the official code, which HF names gelu.
    assert config["hidden_act"] == "gelu"
    assert {k: config[k] for k in ("vocab_size", "embedding_size", "hidden_size",
                                   "num_hidden_layers", "num_attention_heads",
                                   "intermediate_size", "max_position_embeddings",
                                   "type_vocab_size", "layer_norm_eps", "pad_token_id")} == {
        "vocab_size": V, "embedding_size": E, "hidden_size": H, "num_hidden_layers": 2,
        "num_attention_heads": 2, "intermediate_size": F, "max_position_embeddings": P,
        "type_vocab_size": T, "layer_norm_eps": 1e-12, "pad_token_id": fx.PAD}
    files = sorted(os.listdir(tmp_path / "disc"))
    assert files == ["config.json", "model.safetensors", "special_tokens_map.json",
                     "tokenizer_config.json", "vocab.txt"]
    tok = json.load(open(tmp_path / "disc" / "tokenizer_config.json"))
    assert tok["tokenizer_class"] == "ElectraTokenizer" and tok["do_lower_case"] is True
    with open(tmp_path / "disc" / "vocab.txt") as a, open(os.path.join(source, "vocab.txt")) as b:
        assert a.read() == b.read()
    # transformers refuses safetensors files whose metadata lacks format=pt.
    from safetensors import safe_open
    with safe_open(str(tmp_path / "disc" / "model.safetensors"), framework="numpy") as f:
        assert f.metadata()["format"] == "pt"
    # Orientation: HF linear weights are [out, in], ours [in, out].
    tensors, _ = read_export(tmp_path / "disc")
    ours = checkpoint.read_all(md.checkpoint)
    np.testing.assert_array_equal(tensors["electra.encoder.layer.1.intermediate.dense.weight"],
                                  ours["electra/encoder/layer_1/intermediate/dense/kernel"].T)
    np.testing.assert_array_equal(tensors["discriminator_predictions.dense_prediction.weight"],
                                  ours["discriminator_predictions/dense_1/kernel"].T)


def test_round_trip_pretrained_model_is_bit_identical(source, tmp_path):
    md = model_dir_lib.read_model_dir(source)
    export_model.export_huggingface(md, str(tmp_path / "disc"), "discriminator")
    export_model.export_huggingface(md, str(tmp_path / "gen"), "generator")
    export_model.import_huggingface(str(tmp_path / "disc"), str(tmp_path / "back"),
                                    generator_dir=str(tmp_path / "gen"))
    original = {n: v for n, v in checkpoint.read_all(md.checkpoint).items()
                if n != "global_step" and not n.endswith(("adam_m", "adam_v"))}
    back = checkpoint.read_all(str(tmp_path / "back"))
    back.pop("global_step", None)
    assert sorted(back) == sorted(original)  # tied embeddings stay one table under electra/
    for name, value in original.items():
        np.testing.assert_array_equal(back[name], value, err_msg=name)
    # The imported dir is a model dir like ours: configs, vocab, checkpoint.
    again = model_dir_lib.read_model_dir(str(tmp_path / "back"))
    assert again.bert_config == md.bert_config
    assert again.generator_config == md.generator_config


def test_imported_model_initialises_fine_tuning(source, tmp_path, caplog):
    md = model_dir_lib.read_model_dir(source)
    export_model.export_huggingface(md, str(tmp_path / "disc"), "discriminator")
    with caplog.at_level("INFO"):
        export_model.import_huggingface(str(tmp_path / "disc"),
                                        str(tmp_path / "models" / "hf_small"))
    hparams = export_model.finetune_hparams(md.bert_config)
    assert json.dumps(hparams, sort_keys=True) in caplog.text  # the import says what to pass
    config = configure_finetuning.FinetuningConfig.from_hparams(
        "hf_small", str(tmp_path), dict(hparams, task_names=["sst"], max_seq_length=16))
    # The defaults find the imported dir: run_finetuning --model-name hf_small would start here.
    assert config.init_checkpoint == str(tmp_path / "models" / "hf_small")
    assert config.vocab_file == str(tmp_path / "models" / "hf_small" / "vocab.txt")
    model = finetuning_model.FinetuningModel(config, task_builder.get_tasks(config))
    report = model.restore_pretrained(config.init_checkpoint)
    assert len(report.restored) == len(model.encoder_variables())
    ours = checkpoint.read_all(md.checkpoint)
    for name, var in model.encoder_variables().items():
        np.testing.assert_array_equal(var.numpy(), ours[name], err_msg=name)


def test_round_trip_classifier_and_head_equivalence(source, tmp_path):
    trial = trial_dir(tmp_path, source)
    tmd = model_dir_lib.read_model_dir(trial, vocab_file=os.path.join(source, "vocab.txt"))
    export_model.export_huggingface(tmd, str(tmp_path / "cls"))
    tensors, config = read_export(tmp_path / "cls")
    assert config["architectures"] == ["ElectraForSequenceClassification"]
    assert config["finetuning_task"] == "mnli" and config["classifier_dropout"] == 0.0
    assert config["id2label"] == {"0": "contradiction", "1": "entailment", "2": "neutral"}
    assert config["problem_type"] == "single_label_classification"

    # The HF head (dense -> exact GELU -> out_proj) on [CLS] vectors equals the official one-layer
    # head, for vectors anywhere LayerNorm can put them.
    ours = checkpoint.read_all(tmd.checkpoint)
    gamma = ours["electra/encoder/layer_1/output/LayerNorm/gamma"]
    beta = ours["electra/encoder/layer_1/output/LayerNorm/beta"]
    z = np.random.default_rng(2).normal(size=[64, H])
    z[0] = 0.0
    z[0, 0] = -math.sqrt(H - 1)  # the extreme LayerNorm output
    z = (z - z.mean(-1, keepdims=True)) / z.std(-1, keepdims=True)
    cls = (gamma * z + beta).astype(np.float32)
    erf = np.vectorize(math.erf)
    hidden = cls @ tensors["classifier.dense.weight"].T + tensors["classifier.dense.bias"]
    hidden = 0.5 * hidden * (1.0 + erf(hidden / math.sqrt(2.0)))
    hf_logits = (hidden @ tensors["classifier.out_proj.weight"].T
                 + tensors["classifier.out_proj.bias"])
    official = cls @ ours["task_specific/mnli/dense/kernel"] + ours["task_specific/mnli/dense/bias"]
    np.testing.assert_allclose(hf_logits, official, atol=1e-4)

    export_model.import_huggingface(str(tmp_path / "cls"), str(tmp_path / "back"))
    back = checkpoint.read_all(str(tmp_path / "back"))
    for name, value in ours.items():
        if name == "global_step" or name.endswith("adam_m"):
            continue
        np.testing.assert_array_equal(back[name], value, err_msg=name)


def test_import_of_an_hf_trained_classifier_keeps_the_encoder(source, tmp_path, caplog):
    trial = trial_dir(tmp_path, source)
    tmd = model_dir_lib.read_model_dir(trial, vocab_file=os.path.join(source, "vocab.txt"))
    export_model.export_huggingface(tmd, str(tmp_path / "cls"))
    tensors, _ = read_export(tmp_path / "cls")
    tensors["classifier.dense.weight"] = tensors["classifier.dense.weight"] * 0.5  # "trained" in HF
    st_numpy.save_file(tensors, str(tmp_path / "cls" / "model.safetensors"),
                       metadata={"format": "pt"})
    with caplog.at_level("INFO"):
        imported = export_model.import_huggingface(str(tmp_path / "cls"), str(tmp_path / "back"))
    assert not any(n.startswith("task_specific/") for n in imported)
    assert any(n.startswith("electra/encoder/") for n in imported)
    assert "cannot express" in caplog.text and "classifier.dense.weight" in caplog.text


@pytest.mark.parametrize("architecture", ["ElectraModel", "ElectraForQuestionAnswering"])
def test_other_electra_models_import_their_encoder(source, tmp_path, architecture, caplog):
    md = model_dir_lib.read_model_dir(source)
    export_model.export_huggingface(md, str(tmp_path / "hf"), "discriminator")
    tensors, config = read_export(tmp_path / "hf")
    tensors = {n: v for n, v in tensors.items() if n.startswith("electra.")}
    if architecture == "ElectraModel":  # the bare model saves its parameters without a prefix
        tensors = {n[len("electra."):]: v for n, v in tensors.items()}
    else:
        tensors["qa_outputs.weight"] = np.zeros([2, H], np.float32)
    st_numpy.save_file(tensors, str(tmp_path / "hf" / "model.safetensors"),
                       metadata={"format": "pt"})
    config["architectures"] = [architecture]
    with open(tmp_path / "hf" / "config.json", "w") as f:
        json.dump(config, f)
    with caplog.at_level("INFO"):
        imported = export_model.import_huggingface(str(tmp_path / "hf"), str(tmp_path / "back"))
    ours = checkpoint.read_all(md.checkpoint)
    assert sorted(imported) == sorted(n for n in ours if n.startswith("electra/")
                                      and not n.endswith("adam_m"))
    for name, value in imported.items():
        np.testing.assert_array_equal(value, ours[name], err_msg=name)
    assert "imported the encoder only" in caplog.text


def test_tagger_maps_exactly_to_token_classification(source, tmp_path):
    from finetune.tagging import tagging_tasks
    labels = tagging_tasks.chunk_label_list(tagging_tasks.Chunking.chunk_types)
    trial = trial_dir(tmp_path, source, labels=len(labels), task="chunk")
    tmd = model_dir_lib.read_model_dir(trial, vocab_file=os.path.join(source, "vocab.txt"))
    export_model.export_huggingface(tmd, str(tmp_path / "tagger"))
    tensors, config = read_export(tmp_path / "tagger")
    assert config["architectures"] == ["ElectraForTokenClassification"]
    assert config["finetuning_task"] == "chunk"
    assert [config["id2label"][str(i)] for i in range(len(labels))] == labels
    # ElectraForTokenClassification: dropout + Linear(H, C) on every token, named "classifier".
    expected = documented_params("discriminator", H, F)
    expected = {n: s for n, s in expected.items() if n.startswith("electra.")}
    expected.update({"classifier.weight": (len(labels), H), "classifier.bias": (len(labels),)})
    assert {n: tuple(v.shape) for n, v in tensors.items()} == expected
    ours = checkpoint.read_all(tmd.checkpoint)
    np.testing.assert_array_equal(tensors["classifier.weight"],
                                  ours["task_specific/chunk/dense/kernel"].T)
    export_model.import_huggingface(str(tmp_path / "tagger"), str(tmp_path / "back"))
    back = checkpoint.read_all(str(tmp_path / "back"))
    for name, value in ours.items():
        if name != "global_step" and not name.endswith("adam_m"):
            np.testing.assert_array_equal(back[name], value, err_msg=name)


def test_import_refuses_pickles_and_existing_outputs(source, tmp_path):
    md = model_dir_lib.read_model_dir(source)
    out = tmp_path / "disc"
    export_model.export_huggingface(md, str(out), "discriminator")
    with pytest.raises(ValueError, match="already exists; pass --overwrite"):
        export_model.export_huggingface(md, str(out), "discriminator")
    export_model.export_huggingface(md, str(out), "discriminator", overwrite=True)
    os.rename(out / "model.safetensors", out / "pytorch_model.bin")
    assert export_model.main(["--import-dir", str(out), "--format", "huggingface",
                              "--output", str(tmp_path / "back")]) == 2
    with pytest.raises(ValueError, match="pytorch_model.bin is a pickle"):
        export_model.import_huggingface(str(out), str(tmp_path / "back"))
    assert not os.path.exists(tmp_path / "back")
    assert [p for p in os.listdir(tmp_path) if p.startswith(".")] == []  # no temp dirs left


def test_failed_export_leaves_no_partial_output(source, tmp_path, monkeypatch):
    md = model_dir_lib.read_model_dir(source)

    def broken(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(export_model, "_tokenizer_files", broken)
    with pytest.raises(OSError):
        export_model.export_huggingface(md, str(tmp_path / "disc"), "discriminator")
    assert os.listdir(tmp_path) == []


def release_dir(source, root) -> str:
    """An official release's layout: the checkpoint and vocab.txt, no config."""
    release = root / "release"
    release.mkdir()
    tensors = checkpoint.read_all(model_dir_lib.read_model_dir(source).checkpoint)
    checkpoint.save_tensors(str(release / "electra_tiny"), tensors)
    fx.write_vocab(str(release / "vocab.txt"))
    return str(release)


def test_release_dir_without_configs_needs_its_heads_stated(source, tmp_path, caplog):
    """The head count was guessed (one per 64 hidden units: 1 here, the model has 2) and
    exported as fact; no checkpoint shape shows it."""
    release = release_dir(source, tmp_path)
    with pytest.raises(ValueError, match=r"release has no bert_config.json \(nor "
                       r"pretrain_config.json\): the checkpoint shows 2 layers of hidden size 32 "
                       r"but not the number of attention heads.*--num-attention-heads"):
        model_dir_lib.read_model_dir(release)
    assert export_model.main(["--model-dir", release, "--format", "huggingface",
                              "--output", str(tmp_path / "guess")]) == 2
    assert "--num-attention-heads" in caplog.text and not (tmp_path / "guess").exists()
    md = model_dir_lib.read_model_dir(release, num_attention_heads=2)
    assert md.bert_config.num_attention_heads == 2 and "2 heads from --num-attention-heads" \
        in md.notes[0]
    assert (md.bert_config.hidden_size, md.bert_config.embedding_size) == (H, E)
    # The generator's heads are not known either: refused when it is asked for.
    assert md.generator_config is None and "--generator-num-attention-heads" in \
        md.generator_unknown
    assert export_model.main(["--model-dir", release, "--num-attention-heads", "2", "--format",
                              "huggingface", "--model", "generator",
                              "--output", str(tmp_path / "gen")]) == 2
    assert export_model.main(["--model-dir", release, "--num-attention-heads", "2",
                              "--generator-num-attention-heads", "1", "--format", "huggingface",
                              "--model", "generator", "--output", str(tmp_path / "gen")]) == 0
    exported, config = read_export(tmp_path / "gen")
    assert config["architectures"] == ["ElectraForMaskedLM"] and config["num_attention_heads"] == 1
    assert config["hidden_size"] == HG


def test_pretraining_dir_without_bert_config_is_rebuilt_from_its_pretrain_config(source,
                                                                                 tmp_path):
    """pretrain_config.json states the run's architecture: read, and checked against the
    checkpoint, instead of a head count guessed from the hidden size."""
    model = release_dir(source, tmp_path)
    settings = PretrainingConfig.from_hparams("m", str(tmp_path), fx.tiny_hparams(
        embedding_size=E)).to_dict()
    with open(os.path.join(model, "pretrain_config.json"), "w") as f:
        json.dump(settings, f)
    md = model_dir_lib.read_model_dir(model)
    assert md.bert_config == model_dir_lib.read_model_dir(source).bert_config
    assert md.generator_config == model_dir_lib.read_model_dir(source).generator_config
    assert "rebuilt from pretrain_config.json" in md.notes[0]
    with pytest.raises(ValueError, match=r"--num-attention-heads 4, but .*release says 2"):
        model_dir_lib.read_model_dir(model, num_attention_heads=4)
    with open(os.path.join(model, "pretrain_config.json"), "w") as f:
        json.dump(dict(settings, model_hparam_overrides=dict(
            settings["model_hparam_overrides"], intermediate_size=128)), f)
    with pytest.raises(ValueError, match=r"pretrain_config.json gives the intermediate_size 128 "
                       r"but the checkpoint's tensors have 64"):
        model_dir_lib.read_model_dir(model)


def test_score_text_states_what_it_needs_for_a_release_dir(source, tmp_path, caplog, capsys):
    import score_text

    release = release_dir(source, tmp_path)
    assert score_text.main(["--model-dir", release, "--json", "w1 w2"]) == 2
    assert "not the number of attention heads" in caplog.text
    assert score_text.main(["--model-dir", release, "--num-attention-heads", "2", "--json",
                            "--generator", "w1 [MASK]"]) == 2
    assert "--generator-num-attention-heads" in caplog.text
    capsys.readouterr()
    assert score_text.main(["--model-dir", release, "--num-attention-heads", "2", "--json",
                            "w1 w2"]) == 0
    assert json.loads(capsys.readouterr().out)["tokens"] == ["[CLS]", "w1", "w2", "[SEP]"]


def test_hf_config_activation_names_map_one_to_one():
    values = hf_conversion.hf_config(hf_conversion.modeling.BertConfig(vocab_size=10, hidden_size=8,
                                                                      num_attention_heads=2),
                                     "discriminator")
    config, notes = hf_conversion.bert_config_from_hf(values)
    assert config.hidden_act == "gelu" and not notes
    values["hidden_act"] = "gelu_pytorch_tanh"  # HF's tanh approximation
    config, notes = hf_conversion.bert_config_from_hf(values)
    assert config.hidden_act == "gelu_new" and not notes
    values["model_type"] = "bert"
    with pytest.raises(ValueError, match="not 'electra'"):
        hf_conversion.bert_config_from_hf(values)


def test_a_config_json_without_embedding_size_means_transformers_default(source, tmp_path,
                                                                         caplog):
    """A missing embedding_size was taken as the hidden size, which transformers does not do
    (ElectraConfig's default is 128): the import now reads the file as transformers does, and
    weights of another size are refused by their shapes."""
    values = {"model_type": "electra", "vocab_size": 30, "hidden_size": 256,
              "num_hidden_layers": 1, "num_attention_heads": 4, "intermediate_size": 1024}
    assert hf_conversion.bert_config_from_hf(values)[0].embedding_size == 128
    assert export_model.main(["--model-dir", source, "--format", "huggingface",
                              "--output", str(tmp_path / "hf")]) == 0
    with open(tmp_path / "hf" / "config.json") as f:
        config = json.load(f)
    del config["embedding_size"]
    with open(tmp_path / "hf" / "config.json", "w") as f:
        json.dump(config, f)
    assert export_model.main(["--import-dir", str(tmp_path / "hf"), "--format", "huggingface",
                              "--output", str(tmp_path / "imported")]) == 2
    assert f"word_embeddings.weight is [{V}, {E}], config implies [{V}, 128]" in caplog.text
