"""Gradient-disentangled embedding sharing (hparam embedding_sharing gdes): the hparam and its
refusals, the disentangled gradients, step 0, and one discriminator downstream (fine-tuning,
continued pre-training, probes, scoring, the Hugging Face export) and exact resume.

The reference step of the formulas with gdes is in tests/test_reference_step.py."""
import json
import math
import os

import numpy as np
import pytest
import tensorflow as tf
from safetensors import numpy as st_numpy

import configure_finetuning
import export_model
import pretrain_fixtures as fx
import score_text
from configure_pretraining import PretrainingConfig
from finetune import finetuning_model, task_builder
from model import embedding_sharing
from model import model_dir as model_dir_lib
from pretrain import input_pipeline, masking, run_setup
from pretrain import rng as rng_lib
from pretrain.pretraining_model import PretrainingModel
from pretrain.trainer import Trainer
from util import checkpoint
from util.hparams import HParamError

from tests.test_interop_hf import E, pretrained_dir
from tests.test_objectives import _tool
from tests.test_pretrain_model import make_batch

SPECIAL = masking.SpecialIds(pad=fx.PAD, cls=fx.CLS, sep=fx.SEP, mask=fx.MASK)
TABLE, DELTA = embedding_sharing.TABLE, embedding_sharing.DELTA
GDES = {"embedding_sharing": "gdes"}


def make_config(data_dir="/nonexistent", **overrides) -> PretrainingConfig:
    return PretrainingConfig.from_hparams("m", str(data_dir), fx.tiny_hparams(**overrides))


def run(model, features, training=False):
    rng = rng_lib.ExampleRng(3, tf.constant(0, tf.int64), 0)
    masked = model.mask(features, rng)
    seed = tf.constant([1, 2]) if training else None
    return masked, model(masked, training=training, rng=rng, dropout_seed=seed)


# -- the hparam ---------------------------------------------------------------------------------

def test_embedding_sharing_and_the_official_boolean_agree():
    assert make_config().embedding_sharing == "shared"
    untied = make_config(untied_generator_embeddings=True)
    assert untied.embedding_sharing == "untied"
    spelled = make_config(embedding_sharing="untied")
    assert spelled.untied_generator_embeddings
    assert not make_config(**GDES).untied_generator_embeddings
    with pytest.raises(HParamError, match="must be one of"):
        make_config(embedding_sharing="tied")


@pytest.mark.parametrize("mode", ["gdes", "shared"])
def test_contradicting_the_official_boolean_names_both_keys(mode):
    with pytest.raises(HParamError, match=f"'embedding_sharing' '{mode}' contradicts hparam "
                                          "'untied_generator_embeddings' true"):
        make_config(embedding_sharing=mode, untied_generator_embeddings=True)


@pytest.mark.parametrize("hparams, other_key", [
    ({"electra_objective": False}, "electra_objective"),
    ({"electra_objective": False, "replace_mlm": True}, "replace_mlm"),
    ({"electra_objective": False, "all_tokens_mlm": True}, "all_tokens_mlm"),
    ({"uniform_generator": True}, "uniform_generator"),
    ({"unigram_generator": True}, "unigram_generator"),
    ({"untied_generator": False}, "untied_generator"),
    ({"freeze_generator": True, "generator_hidden_size": 1.0}, "freeze_generator"),
])
def test_gdes_without_a_generator_table_or_a_discriminator_is_refused(hparams, other_key):
    with pytest.raises(HParamError, match=f"hparam 'embedding_sharing' gdes .*{other_key}"):
        make_config(**GDES, **hparams)


# -- the model ----------------------------------------------------------------------------------

def test_variables_and_step_zero_equal_the_paper_sharing():
    """E_delta is a variable of its own, of the table's shape (embedding size 16, hidden 32: the
    projection exists), zero at first; the whole model then computes what ES computes."""
    model = PretrainingModel(make_config(**GDES), SPECIAL)
    variables = model.model_variables()
    assert variables[DELTA].shape == variables[TABLE].shape == [fx.VOCAB_SIZE, 16]
    assert "electra/embeddings_project/kernel" in variables
    assert not variables[DELTA].numpy().any()
    embeddings = model.discriminator_encoder.embeddings
    assert model.generator.encoder.embeddings is embeddings.shared  # E_G is the generator's
    np.testing.assert_array_equal(embeddings.token_table().numpy(), variables[TABLE].numpy())
    paper = PretrainingModel(make_config(), SPECIAL)
    assert sorted(paper.model_variables()) == sorted(set(variables) - {DELTA})
    features = make_batch()
    for ours, theirs in zip(run(model, features)[1], run(paper, features)[1]):
        if ours is not None:
            np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


def _gradients(model, features, loss_of) -> dict:
    """name -> gradient norm of loss_of(output) (None: no path from the loss)."""
    with tf.GradientTape() as tape:
        loss = loss_of(run(model, features, training=True)[1])
    variables = model.model_variables()
    grads = tape.gradient(loss, list(variables.values()))
    return {n: None if g is None else float(tf.norm(tf.convert_to_tensor(g)))
            for n, g in zip(variables, grads)}


@pytest.mark.parametrize("objective", [
    {}, {"electra_objective": False, "electric_objective": True, "two_tower_generator": True}],
    ids=["electra", "electric"])
def test_each_loss_reaches_only_its_own_part_of_the_table(objective):
    model = PretrainingModel(make_config(**GDES, **objective), SPECIAL)
    model.model_variables()[DELTA].assign(tf.random.normal([fx.VOCAB_SIZE, 16], stddev=0.02))
    features = make_batch()
    from_generator = _gradients(model, features, lambda out: out.mlm_loss)
    from_discriminator = _gradients(model, features, lambda out: out.disc_loss)
    assert from_generator[TABLE] > 0 and not from_generator[DELTA]
    assert from_discriminator[DELTA] > 0 and not from_discriminator[TABLE]
    # The rest of the embeddings module stays shared, as under ES.
    for name in ("electra/embeddings/position_embeddings", "electra/embeddings/LayerNorm/gamma"):
        assert from_generator[name] > 0 and from_discriminator[name] > 0


# -- one discriminator downstream ---------------------------------------------------------------

@pytest.fixture(scope="module")
def gdes_dir(tmp_path_factory):
    """(model dir, the PretrainingModel it holds): random non-trivial weights, E_delta too."""
    path = pretrained_dir(tmp_path_factory.mktemp("gdes"), **GDES)
    model = PretrainingModel(make_config(embedding_size=E, **GDES), SPECIAL)
    report = checkpoint.restore(model.model_variables(), path)
    assert DELTA in report.restored and checkpoint.read_all(path)[DELTA].any()
    return path, model


def discriminator_logits(model, features) -> np.ndarray:
    encoded = model.discriminator_encoder(features["input_ids"], features["input_mask"],
                                          features["segment_ids"], training=False)
    return model.objective.head(encoded.sequence_output).numpy()


def folded_table(model) -> np.ndarray:
    variables = model.model_variables()
    return variables[TABLE].numpy() + variables[DELTA].numpy()


def test_fold_gives_one_table_the_discriminator_reads(gdes_dir):
    _, model = gdes_dir
    tensors = {n: v.numpy() for n, v in model.model_variables().items()}
    folded = embedding_sharing.fold(tensors)
    assert DELTA not in folded and DELTA in tensors
    np.testing.assert_array_equal(
        folded[TABLE], model.discriminator_encoder.embeddings.token_table().numpy())
    assert embedding_sharing.fold({TABLE: tensors[TABLE]})[TABLE] is tensors[TABLE]


def test_fine_tuning_starts_from_e_g_plus_e_delta(gdes_dir):
    path, model = gdes_dir
    md = model_dir_lib.read_model_dir(path)
    config = configure_finetuning.FinetuningConfig.from_hparams(
        "m", os.path.dirname(os.path.dirname(path)),
        dict(export_model.finetune_hparams(md.bert_config), task_names=["sst"],
             max_seq_length=fx.SEQ_LEN))
    finetuning = finetuning_model.FinetuningModel(config, task_builder.get_tasks(config))
    report = finetuning.restore_pretrained(path)
    assert DELTA not in report.unused
    assert len(report.restored) == len(finetuning.encoder_variables())
    np.testing.assert_array_equal(finetuning.encoder_variables()[TABLE].numpy(),
                                  folded_table(model))
    features = make_batch()
    ours = finetuning.encoder(features["input_ids"], features["input_mask"],
                              features["segment_ids"], training=False).sequence_output
    theirs = model.discriminator_encoder(features["input_ids"], features["input_mask"],
                                         features["segment_ids"], training=False).sequence_output
    real = features["input_mask"].numpy() > 0  # fine-tuning leaves padding out (zeros)
    np.testing.assert_allclose(ours.numpy()[real], theirs.numpy()[real], rtol=1e-5, atol=1e-5)


def test_continued_pretraining_reads_one_table_or_both_parts(gdes_dir):
    path, model = gdes_dir
    source = {n: v.numpy() for n, v in model.model_variables().items()}
    paper = Trainer(make_config(embedding_size=E), SPECIAL)
    report = paper.init_from(path)
    assert DELTA not in report.unused
    np.testing.assert_array_equal(paper.model_vars[TABLE].numpy(), folded_table(model))
    again = Trainer(make_config(embedding_size=E, **GDES), SPECIAL)
    again.init_from(path)
    for name, var in again.model_vars.items():
        np.testing.assert_array_equal(var.numpy(), source[name], err_msg=name)


def test_probes_and_score_text_read_the_discriminator_and_the_generator(gdes_dir):
    path, model = gdes_dir
    md = model_dir_lib.read_model_dir(path)
    features = make_batch()
    ids, mask, segments = (features[k] for k in ("input_ids", "input_mask", "segment_ids"))
    encoder = _tool("probe").build_encoder(md, 0, restore=True)
    np.testing.assert_array_equal(
        encoder(ids, mask, segments, training=False).sequence_output.numpy(),
        model.discriminator_encoder(ids, mask, segments, training=False).sequence_output.numpy())
    scorer = score_text.build_scorer(md, need_generator=True)
    np.testing.assert_array_equal(scorer.discriminate(ids, mask, segments).numpy(),
                                  discriminator_logits(model, features))
    positions = tf.constant([[1, 2, 3]] * int(ids.shape[0]))
    masked = masking.MaskedInputs(ids, mask, segments, positions, tf.gather(ids, positions,
                                                                            batch_dims=1),
                                  tf.ones(positions.shape))
    np.testing.assert_allclose(scorer.generator_logits(ids, mask, segments, positions).numpy(),
                               model.generator(masked, training=False).logits.numpy(),
                               rtol=1e-6, atol=1e-6)


# -- the Hugging Face export, in Hugging Face's formulas ------------------------------------------

def _layer_norm(x, weight, bias, eps):
    mean = x.mean(-1, keepdims=True)
    variance = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(variance + eps) * weight + bias


def _gelu(x):
    return 0.5 * x * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))


def hf_discriminator_logits(p: dict, config: dict, ids, mask, segments) -> np.ndarray:
    """ElectraForPreTraining.forward (transformers' modeling_electra.py), eval mode, in numpy
    float64 on the exported parameters `p` and config.json `config`."""
    p = {n: v.astype(np.float64) for n, v in p.items()}
    eps = config["layer_norm_eps"]

    def linear(x, name):  # torch.nn.Linear: weight [out, in]
        return x @ p[f"{name}.weight"].T + p[f"{name}.bias"]

    e = "electra.embeddings"
    x = (p[f"{e}.word_embeddings.weight"][ids] + p[f"{e}.token_type_embeddings.weight"][segments]
         + p[f"{e}.position_embeddings.weight"][np.arange(ids.shape[1])])
    x = linear(_layer_norm(x, p[f"{e}.LayerNorm.weight"], p[f"{e}.LayerNorm.bias"], eps),
               "electra.embeddings_project")
    heads = config["num_attention_heads"]
    size = x.shape[-1] // heads
    extended = (1.0 - mask[:, None, None, :]) * np.finfo(np.float32).min

    def split(t):
        return t.reshape(t.shape[0], t.shape[1], heads, size).transpose(0, 2, 1, 3)

    for i in range(config["num_hidden_layers"]):
        a = f"electra.encoder.layer.{i}.attention"
        scores = split(linear(x, f"{a}.self.query")) @ split(
            linear(x, f"{a}.self.key")).transpose(0, 1, 3, 2) / math.sqrt(size) + extended
        probs = np.exp(scores - scores.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        context = (probs @ split(linear(x, f"{a}.self.value"))).transpose(0, 2, 1, 3)
        x = _layer_norm(linear(context.reshape(x.shape), f"{a}.output.dense") + x,
                        p[f"{a}.output.LayerNorm.weight"], p[f"{a}.output.LayerNorm.bias"], eps)
        o = f"electra.encoder.layer.{i}"
        ffn = linear(_gelu(linear(x, f"{o}.intermediate.dense")), f"{o}.output.dense")
        x = _layer_norm(ffn + x, p[f"{o}.output.LayerNorm.weight"], p[f"{o}.output.LayerNorm.bias"],
                        eps)
    assert config["hidden_act"] == "gelu"  # the exact GELU, as _gelu
    h = _gelu(linear(x, "discriminator_predictions.dense"))
    return linear(h, "discriminator_predictions.dense_prediction")[..., 0]


def test_hugging_face_export_computes_the_discriminator_logits(gdes_dir, tmp_path):
    path, model = gdes_dir
    md = model_dir_lib.read_model_dir(path)
    export_model.export_huggingface(md, str(tmp_path / "disc"), "discriminator")
    export_model.export_huggingface(md, str(tmp_path / "gen"), "generator")
    tensors = st_numpy.load_file(str(tmp_path / "disc" / "model.safetensors"))
    with open(tmp_path / "disc" / "config.json") as f:
        config = json.load(f)
    features = make_batch()
    ids, mask, segments = (features[k].numpy() for k in ("input_ids", "input_mask",
                                                         "segment_ids"))
    hf = hf_discriminator_logits(tensors, config, ids, mask, segments)
    ours = discriminator_logits(model, features)
    real = mask > 0
    np.testing.assert_allclose(hf[real], ours[real], atol=1e-4)  # the interop tolerance
    np.testing.assert_array_equal(tensors["electra.embeddings.word_embeddings.weight"],
                                  folded_table(model))
    generator = st_numpy.load_file(str(tmp_path / "gen" / "model.safetensors"))
    np.testing.assert_array_equal(generator["electra.embeddings.word_embeddings.weight"],
                                  model.model_variables()[TABLE].numpy())  # E_G alone


# -- resume -------------------------------------------------------------------------------------

def test_resuming_under_another_sharing_is_refused(tmp_path):
    saved = tmp_path / "pretrain_config.json"
    saved.write_text(json.dumps(make_config(**GDES).to_dict()))
    with pytest.raises(run_setup.IncompatibleResumeError, match="embedding_sharing: 'gdes' -> "
                                                                "'shared'"):
        run_setup.check_resume_compatible(make_config(), str(saved))
    # A model dir written before the hparam existed resumes as before.
    before = {k: v for k, v in make_config().to_dict().items() if k != "embedding_sharing"}
    saved.write_text(json.dumps(before))
    run_setup.check_resume_compatible(make_config(), str(saved))


def test_resume_restores_both_parts_and_continues_exactly(tmp_path):
    data_dir = fx.write_data(str(tmp_path / "data"))
    config = make_config(data_dir, **GDES)
    files = input_pipeline.find_files(config.pretrain_tfrecords).train
    first = Trainer(config, SPECIAL)
    iterator = first.train_iterator(files)
    first.train_steps(iterator, 2)
    prefix = checkpoint.save_tensors(str(tmp_path / "ckpt" / "model.ckpt-2"),
                                     first.checkpoint_tensors())
    saved = checkpoint.read_all(prefix)
    assert saved[DELTA].any() and saved[DELTA + "/adam_m"].any()
    first.train_steps(iterator, 2)
    resumed = Trainer(config, SPECIAL)
    resumed.restore(prefix)
    for name, value in resumed.checkpoint_tensors().items():
        np.testing.assert_array_equal(value, saved[name], err_msg=name)
    resumed.train_steps(resumed.train_iterator(files), 2)
    expected = first.checkpoint_tensors()
    for name, value in resumed.checkpoint_tensors().items():
        np.testing.assert_array_equal(value, expected[name], err_msg=name)
