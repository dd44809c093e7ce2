"""The project's training steps against the official release's formulas (tests/reference_electra.py).

A tiny ELECTRA, BERT and fine-tuning model; the reference reads their weights by official name and
recomputes everything after masking and sampling (which it takes from the project, as both are
random): the generator, corrupted input, labels, discriminator, losses, gradients, clipping and
the AdamW update (official, and with bias correction), through warm-up. Dropout is off in the
training comparisons (the reference has none); the fine-tuning eval comparison keeps the
encoder's and heads' dropout rates at 0.1, so dropout applied at eval shows.

Tolerances, measured on this machine (docs/FIDELITY.md, "The reference step"):
  float32                 losses 1e-6 relative; weights 1e-5 (max |difference| over a variable
                          relative to the variable's max |value|);
  float32, XLA gradients  the same;
  bfloat16                losses 2e-2 relative, weights 3e-3.
The mutation checks (test_reference_catches_*) plant one plausible bug at a time in the project's
step and assert that the comparison fails.
"""
import os
import re
import types

import numpy as np
import pytest
import tensorflow as tf

import reference_electra as ref
from configure_pretraining import PretrainingConfig
from finetune import task_builder
from finetune import trainer as finetune_trainer
from finetune.classification import classification_tasks
from model import embedding_sharing, layers
from util import checkpoint
from pretrain import input_pipeline, masking
from pretrain import pretraining_model
from pretrain import rng as rng_lib
from pretrain.objectives import ReplacedTokenDetection
from pretrain.trainer import Trainer

from tests.test_finetune_data import make_config

V, L, B = 30, 16, 2
SPECIAL = masking.SpecialIds(pad=0, cls=1, sep=2, mask=3)
GEN_HEADS = 1  # official get_generator_config: max(1, hidden // 64)
DISC_HEADS = 2
NO_DROPOUT = dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
ARCH = dict(hidden_size=16, num_hidden_layers=2, num_attention_heads=DISC_HEADS,
            intermediate_size=32, max_position_embeddings=L)
# Embedding size 12: both the discriminator (16) and the generator (8) project their embeddings.
PRETRAIN = dict(vocab_size=V, max_seq_length=L, embedding_size=12, generator_hidden_size=0.5,
                model_hparam_overrides=dict(ARCH, **NO_DROPOUT), train_batch_size=B,
                learning_rate=1e-2, num_warmup_steps=4, num_train_steps=10, mask_prob=0.25,
                seed=3)
# Biases whose true gradient is 0: softmax ignores a shift common to a row of logits (attention
# keys' biases; the QA start and end scorers'), so both steps apply Adam-normalised rounding noise.
ZERO_GRADIENT = re.compile(r"/self/key/bias$|^task_specific/squad/dense(_1)?/bias$")
TOLERANCE = {"float32": (1e-6, 1e-5), "bfloat16": (1e-3, 0.2)}  # (losses, weights)


def pretraining_features():
    rng = np.random.RandomState(0)
    ids = rng.randint(4, V, size=[B, L]).astype(np.int32)
    mask = np.ones([B, L], np.int32)
    mask[0, 10:] = 0  # the first example is padded: fewer masked positions than slots
    ids[:, 0], ids[0, 9], ids[1, L - 1] = SPECIAL.cls, SPECIAL.sep, SPECIAL.sep
    ids[0, 10:] = SPECIAL.pad
    segments = np.zeros([B, L], np.int32)
    segments[:, 5:] = 1
    segments *= mask
    return {"input_ids": tf.constant(ids), "input_mask": tf.constant(mask),
            "segment_ids": tf.constant(segments)}


class Setup:
    """A project trainer (pre-training Trainer or fine-tuning ModelRunner), its initial weights,
    and its step: the compiled loop of steps, or one replica step and update called eagerly
    (the same code without the loop's trace, for variants and mutations)."""

    def __init__(self, trainer, variables, data):
        self.trainer, self.variables, self.data = trainer, variables, data
        self.initial = {n: v.numpy() for n, v in variables.items()}

    def reset(self):
        """Initial weights, zero Adam slots, global_step 0 -> reference weights and slots."""
        for name, var in self.variables.items():
            var.assign(self.initial[name])
        optimizer = self.trainer.optimizer
        for var in optimizer.variables:
            if var.name.endswith(("adam_m:0", "adam_v:0")):
                var.assign(tf.zeros_like(var))
        optimizer.global_step.assign(0)
        return {n: tf.Variable(v) for n, v in self.initial.items()}, {}

    def step(self) -> dict:
        """One project step -> its metrics (loss first): the replica step and the update of the
        step engine, called eagerly (the compiled loop around them adds the finite check and
        the metric sums, tests/test_step_engine.py; tracing it would double this file's time)."""
        engine = self.trainer.engine
        grads, values = engine._replica_step(self.data)
        engine._apply(grads, values)
        return dict(zip(engine.metric_names, values.numpy()))


def relative_to_scale(got, expected):
    return float(np.max(np.abs(got - expected)) / max(float(np.max(np.abs(expected))), 1e-30))


def weight_differences(variables, reference):
    """name -> max |project - reference| / max |reference| over the variable, except ZERO_GRADIENT
    variables."""
    return {name: relative_to_scale(var.numpy(), reference[name].numpy())
            for name, var in variables.items() if not ZERO_GRADIENT.search(name)}


def relative(got, expected):
    return float(abs(got - expected) / abs(expected))


def reference_update(weights, slots, loss_fn, rate, *, weight_decay_rate, step, bias_correction):
    """The reference's gradients of loss_fn() over `weights` and its optimizer step -> (outputs
    of loss_fn, global norm before clipping)."""
    names = sorted(weights)
    with tf.GradientTape() as tape:
        outputs = loss_fn()
        loss = outputs[0] if isinstance(outputs, tuple) else outputs["total"]
    grads = tape.gradient(loss, [weights[n] for n in names])
    grads = {n: tf.convert_to_tensor(g) for n, g in zip(names, grads) if g is not None}
    norm = ref.optimizer_step(weights, slots, grads, rate, weight_decay_rate=weight_decay_rate,
                              step=step, bias_correction=bias_correction)
    return outputs, float(norm)


def assert_within(result, dtype="float32"):
    # `pytest -s` prints the differences, named by the test (docs/FIDELITY.md quotes them).
    test = os.environ.get("PYTEST_CURRENT_TEST", "?").split(" ")[0].split("::")[-1]
    print(f"\n{test} ({dtype}): losses (max) {max(result['diffs'].values()):.1e}, "
          f"weights (max) {max(result['weights'].values()):.1e}")
    loss_tolerance, weight_tolerance = TOLERANCE[dtype]
    assert max(result["diffs"].values()) <= loss_tolerance, result["diffs"]
    worst = max(result["weights"], key=result["weights"].get)
    assert result["weights"][worst] <= weight_tolerance, (worst, result["weights"][worst])


# -- pre-training ---------------------------------------------------------------------------------

def make_pretraining(**hparams):
    config = PretrainingConfig.from_hparams("reference", "/nonexistent", dict(PRETRAIN, **hparams))
    trainer = Trainer(config, SPECIAL, use_xla=config.use_xla)
    variables = {n: v for n, v in trainer.model_vars.items() if v.trainable}
    features = pretraining_features()
    position = tf.tile(tf.constant([input_pipeline.START], tf.int64), [B, 1])
    setup = Setup(trainer, variables, dict(features, **{input_pipeline.POSITION_KEY: position}))

    @tf.function(jit_compile=True, autograph=False)
    def xla_noise(step, shape):
        return rng_lib.ExampleRng(trainer.seed, step, 0).uniform(
            tf.concat([shape, [V]], 0), rng_lib.GUMBEL)

    setup.xla_noise = xla_noise
    return setup


def pretraining_step(setup, weights, slots):
    """One project step and the reference's on the same masks and samples -> differences."""
    trainer, cfg = setup.trainer, setup.trainer.config
    step = trainer.global_step
    rng = rng_lib.ExampleRng(trainer.seed, tf.constant(step, tf.int64), 0)
    masked = trainer.model.mask({k: setup.data[k] for k in pretraining_features()}, rng)
    electra = trainer.model.has_discriminator
    randomness = {}
    if electra and trainer.use_xla:
        # The noise the compiled step samples with, drawn by a compiled function; the
        # reference samples with it from its own logits.
        randomness["uniform_noise"] = setup.xla_noise(
            tf.constant(step, tf.int64), tf.shape(masked.masked_lm_ids))
    elif electra:
        randomness["sampled"] = trainer.model(masked, training=False, rng=rng).sampled_ids
    rate = ref.learning_rate(step, cfg.learning_rate, cfg.num_train_steps, cfg.num_warmup_steps)
    losses, norm = reference_update(
        weights, slots, lambda: ref.pretraining(weights, masked._asdict(), disc_heads=DISC_HEADS,
                                                gen_heads=GEN_HEADS, **randomness),
        rate, weight_decay_rate=cfg.weight_decay_rate, step=step,
        bias_correction=trainer.optimizer.bias_correction)
    got = setup.step()
    diffs = {"loss": relative(got["loss"], float(losses["total"])),
             "mlm_loss": relative(got["mlm_loss"], float(losses["mlm"]))}
    if electra:
        diffs["disc_loss"] = relative(got["disc_loss"], float(losses["disc"]))
    return dict(diffs=diffs,
                weights=weight_differences(setup.variables, weights), norm=norm, rate=rate,
                masked=masked, labels=losses["labels"], **randomness)


@pytest.fixture(scope="module", autouse=True)
def fused_blocks():
    """The elementwise blocks XLA-compiled, as in a full-size run (this module's tiny model is
    below layers.MIN_FUSED_ELEMENTS); the tolerances were set on that path. The graph-op path is
    compared to it in tests/test_modeling.py."""
    saved, layers.MIN_FUSED_ELEMENTS = layers.MIN_FUSED_ELEMENTS, 0
    yield
    layers.MIN_FUSED_ELEMENTS = saved


@pytest.fixture(scope="module")
def electra():
    return make_pretraining()


def test_electra_step_matches_the_official_formulas_through_warmup(electra):
    weights, slots = electra.reset()
    rates = []
    for _ in range(3):
        result = pretraining_step(electra, weights, slots)
        assert_within(result)
        assert result["norm"] > 1.0  # the clip is active
        rates.append(result["rate"])
    assert rates[0] == 0.0 < rates[1] < rates[2]  # warm-up: 0, then rising


def test_electra_step_with_bias_corrected_adam(electra, monkeypatch):
    monkeypatch.setattr(electra.trainer.optimizer, "bias_correction", True)
    weights, slots = electra.reset()
    for _ in range(2):
        assert_within(pretraining_step(electra, weights, slots))


def test_bert_step_matches_the_official_masked_lm():
    setup = make_pretraining(electra_objective=False)
    weights, slots = setup.reset()
    assert not any(n.startswith(("generator/", "discriminator_predictions/")) for n in weights)
    for _ in range(2):
        assert_within(pretraining_step(setup, weights, slots))


def plant_discriminator_gradient_into_the_generator_table(setup, monkeypatch):
    """GDES without its stop_gradient: the discriminator's loss then trains E_G too."""
    def leaking(self, input_ids, token_type_ids, **kwargs):
        words = (tf.gather(self.shared.word_embeddings, input_ids)
                 + tf.gather(self.word_embeddings_delta, input_ids))
        return self.shared(input_ids, token_type_ids, **dict(kwargs, inputs_embeds=words))

    monkeypatch.setattr(embedding_sharing.GradientDisentangledEmbeddings, "__call__", leaking)


def test_gdes_step_matches_the_formulas(monkeypatch):
    """embedding_sharing gdes: the discriminator reads stop_gradient(E_G) + E_delta; E_delta is
    trained (and weight-decayed) as any table. A leak of the discriminator's gradient into E_G
    is caught."""
    setup = make_pretraining(embedding_sharing="gdes")
    delta = embedding_sharing.DELTA
    weights, slots = setup.reset()
    assert delta in weights and not weights[delta].numpy().any()
    for _ in range(2):
        result = pretraining_step(setup, weights, slots)
        assert_within(result)
    assert weights[delta].numpy().any()  # trained by the second step (the first has rate 0)
    assert "weights" not in one_comparison(setup, pretraining_step)
    plant_discriminator_gradient_into_the_generator_table(setup, monkeypatch)
    assert "weights" in one_comparison(setup, pretraining_step)


@pytest.mark.parametrize("variant", ["bfloat16", "xla"])
def test_electra_step_in_bfloat16_and_under_xla(variant):
    dtype = "bfloat16" if variant == "bfloat16" else "float32"
    # One layer, no embedding projections: what these variants compile is kept small.
    setup = make_pretraining(compute_dtype=dtype, use_xla=variant == "xla", embedding_size=16,
                             model_hparam_overrides=dict(PRETRAIN["model_hparam_overrides"],
                                                         num_hidden_layers=1),
                             generator_hidden_size=1.0)
    weights, slots = setup.reset()
    for _ in range(2):
        assert_within(pretraining_step(setup, weights, slots), dtype)


# -- fine-tuning ----------------------------------------------------------------------------------

FINETUNE_TASKS = [("sst", "classification"), ("chunk", "tagging"), ("squad", "squad")]
BEAM = 3


def finetuning_features(tasks):
    """Four rows: sst, chunk, an answerable and an unanswerable squad question."""
    rows = 4
    rng = np.random.RandomState(1)
    features = {}
    for task in tasks:
        for spec in task.get_feature_specs():
            shape = [rows] + list(spec.shape)
            features[spec.name] = np.zeros(shape, np.int32 if spec.is_int_feature else np.float32)
    ids = rng.randint(5, 23, size=[rows, L]).astype(np.int32)
    mask = np.ones([rows, L], np.int32)
    mask[1, 12:] = 0
    ids[:, 0] = 2  # [CLS] of the test vocabulary
    segments = np.zeros([rows, L], np.int32)
    segments[2:, 6:] = 1  # the squad rows' context
    features.update(input_ids=ids * mask, input_mask=mask, segment_ids=segments,
                    task_id=np.arange(rows, dtype=np.int32).clip(0, 2))
    features["sst_label_ids"][0] = 1
    words = [1, 3, 4, 7, 9, 11]  # the tagged row's first pieces
    features["chunk_labeled_positions"][1, :len(words)] = words
    features["chunk_labels"][1, :len(words)] = rng.randint(0, 40, len(words))
    features["chunk_labels_mask"][1, :len(words) - 1] = 1.0  # the last word: another window's
    features["squad_start_positions"][2], features["squad_end_positions"][2] = 8, 10
    features["squad_is_impossible"][3] = 1
    return {k: tf.constant(v) for k, v in features.items()}


@pytest.fixture(scope="module")
def finetuning(tmp_path_factory):
    config = make_config(tmp_path_factory.mktemp("finetune"), [t for t, _ in FINETUNE_TASKS],
                         model_hparam_overrides=ARCH, embedding_size=12, beam_size=BEAM,
                         train_batch_size=4, learning_rate=2e-3, num_train_epochs=3.0,
                         weight_decay_rate=0.5,  # large: its effect shows in two steps
                         # The official layout, padding computed on: QA's masked positions then
                         # hold the official values. Removing padding changes only those
                         # (tests/test_bucketing.py compares every head both ways).
                         remove_padding=False)
    tasks = task_builder.get_tasks(config)
    preprocessor = types.SimpleNamespace(
        prepare_train=lambda: types.SimpleNamespace(steps_per_epoch=4))  # 12 steps
    runner = finetune_trainer.ModelRunner(config, tasks, preprocessor, trial=1)
    variables = {checkpoint.checkpoint_name(v): v for v in runner.model.trainable_variables}
    return Setup(runner, variables, finetuning_features(tasks))


def finetuning_eval(setup):
    """The project's eval outputs (dropout rates 0.1 in the config) against the reference's ->
    max differences relative to each output's scale."""
    _, outputs = setup.trainer.model(setup.data, training=False)
    _, expected = ref.finetuning({n: tf.constant(v) for n, v in setup.initial.items()},
                                 setup.data, FINETUNE_TASKS, num_heads=DISC_HEADS,
                                 training=False, beam_size=BEAM)
    diffs = {f"{task}/{key}": relative_to_scale(outputs[task][key].numpy(),
                                                expected[task][1][key].numpy())
             for task, key in [("sst", "logits"), ("squad", "start_logits"),
                               ("squad", "answerable_logit"), ("squad", "start_top_log_probs"),
                               ("squad", "end_top_log_probs")]}
    diffs["chunk/loss"] = relative(outputs["chunk"]["loss"].numpy()[1],
                                   expected["chunk"][0].numpy()[1])
    return diffs


def finetuning_step(setup, weights, slots):
    """One project step (dropout off: no_finetuning_dropout) and the reference's."""
    runner, config = setup.trainer, setup.trainer.config
    step = runner.global_step
    warmup = config.warmup_proportion * runner.train_steps
    rate = ref.learning_rate(step, config.learning_rate, runner.train_steps, warmup)
    depth_rates = ref.layer_depth_rates(rate, config.layerwise_lr_decay,
                                        ARCH["num_hidden_layers"])
    (loss, _), norm = reference_update(
        weights, slots, lambda: ref.finetuning(weights, setup.data, FINETUNE_TASKS,
                                               num_heads=DISC_HEADS, training=True,
                                               beam_size=BEAM),
        depth_rates, weight_decay_rate=config.weight_decay_rate, step=step,
        bias_correction=False)
    got = setup.step()
    return dict(diffs={"loss": relative(got["loss"], float(loss))}, norm=norm, rate=rate,
                weights=weight_differences(setup.variables, weights))


@pytest.fixture
def no_finetuning_dropout(finetuning, monkeypatch):
    monkeypatch.setattr(classification_tasks, "HEAD_DROPOUT", 0.0)
    for key, value in NO_DROPOUT.items():
        monkeypatch.setattr(finetuning.trainer.model.bert_config, key, value)


def test_finetuning_eval_matches_the_official_heads(finetuning):
    finetuning.reset()
    assert finetuning.trainer.model.bert_config.hidden_dropout_prob == 0.1
    diffs = finetuning_eval(finetuning)
    assert max(diffs.values()) <= 1e-5, diffs


def test_finetuning_steps_match_the_official_formulas(finetuning, no_finetuning_dropout):
    weights, slots = finetuning.reset()
    first, second = (finetuning_step(finetuning, weights, slots) for _ in range(2))
    assert first["rate"] == 0.0 < second["rate"]  # the first step only fills Adam's moments
    for result in (first, second):
        assert result["norm"] > 1.0
        assert_within(result)


# -- mutation checks: each plants one plausible bug in the project's step ---------------------------

# Step 3 of the test batch: a generator sample equals the original token (checked below).
SAMPLE_EQUALS_ORIGINAL_STEP = 3


def failing_checks(result, dtype="float32"):
    """The checks of assert_within that fail: "loss" and/or "weights"."""
    loss_tolerance, weight_tolerance = TOLERANCE[dtype]
    failed = set()
    if max(result["diffs"].values()) > loss_tolerance:
        failed.add("loss")
    if max(result["weights"].values()) > weight_tolerance:
        failed.add("weights")
    return failed


def one_comparison(setup, step_fn, step=1):
    """The reference comparison of one step from the initial weights at `step` (> 0: the
    learning rate is not 0) -> the failing checks."""
    weights, slots = setup.reset()
    setup.trainer.optimizer.global_step.assign(step)
    return failing_checks(step_fn(setup, weights, slots))


def plant_disc_weight_49(setup, monkeypatch):
    monkeypatch.setattr(setup.trainer.model.objective, "disc_weight", 49.0)


def plant_sample_equal_to_original_counts_as_replaced(setup, monkeypatch):
    original = pretraining_model.corrupt
    monkeypatch.setattr(pretraining_model, "corrupt", lambda masked, sampled, **_: original(
        masked, sampled, every_sample_counts=True))


def plant_discriminator_gradient_into_generator(setup, monkeypatch):
    """A soft (straight-through) sample: the same forward values, but the discriminator's loss
    now reaches the generator's logits."""
    original = ReplacedTokenDetection.__call__

    def leaking(self, step):
        leak = tf.reduce_mean(step.generated.logits)
        return original(self, step._replace(
            sequence_output=step.sequence_output + (leak - tf.stop_gradient(leak))))

    monkeypatch.setattr(ReplacedTokenDetection, "__call__", leaking)


def plant_layer_norm_epsilon_1e6(setup, monkeypatch):
    for module in setup.trainer.model.submodules:
        if isinstance(module, layers.LayerNorm):
            monkeypatch.setattr(module, "epsilon", 1e-6)


def plant_masked_lm_loss_unweighted(setup, monkeypatch):
    original = pretraining_model.masked_lm

    def unweighted(logits, masked, denominators):
        return original(logits, masked._replace(
            masked_lm_weights=tf.ones_like(masked.masked_lm_weights)), denominators)

    monkeypatch.setattr(pretraining_model, "masked_lm", unweighted)


def plant_tanh_gelu(setup, monkeypatch):
    for module in setup.trainer.model.submodules:
        if isinstance(module, layers.Dense) and module.activation is layers.gelu:
            monkeypatch.setattr(module, "activation", layers.gelu_tanh)


def plant_adam_epsilon_1e8(setup, monkeypatch):
    monkeypatch.setattr(setup.trainer.optimizer, "epsilon", 1e-8)


@pytest.mark.parametrize("plant, caught_by, step", [
    (plant_disc_weight_49, "loss", 1),
    (plant_sample_equal_to_original_counts_as_replaced, "loss", SAMPLE_EQUALS_ORIGINAL_STEP),
    (plant_discriminator_gradient_into_generator, "weights", 1),
    (plant_layer_norm_epsilon_1e6, "weights", 1),  # at init the losses are near log 2 and flat
    (plant_masked_lm_loss_unweighted, "loss", 1),
    (plant_tanh_gelu, "weights", 1),
    (plant_adam_epsilon_1e8, "weights", 1),
])
def test_reference_catches_a_planted_pretraining_bug(electra, monkeypatch, plant, caught_by, step):
    # Unplanted, the check passes (at step 3 the first Adam step from zero moments is large
    # enough that noise-level gradients move some weights by 1e-5: the loss check is the one).
    assert caught_by not in one_comparison(electra, pretraining_step, step)
    if plant is plant_sample_equal_to_original_counts_as_replaced:
        result_masked = electra.trainer.model.mask(
            {k: electra.data[k] for k in pretraining_features()},
            rng_lib.ExampleRng(electra.trainer.seed, tf.constant(step, tf.int64), 0))
        sampled = electra.trainer.model(result_masked, training=False, rng=rng_lib.ExampleRng(
            electra.trainer.seed, tf.constant(step, tf.int64), 0)).sampled_ids
        assert np.any((sampled.numpy() == result_masked.masked_lm_ids.numpy())
                      & (result_masked.masked_lm_weights.numpy() > 0))
    plant(electra, monkeypatch)
    assert caught_by in one_comparison(electra, pretraining_step, step)


def plant_dropout_at_eval(setup, monkeypatch):
    original = layers._random_bits

    def always(shape, seeds, training, rate):
        return original(shape, seeds or layers.SeedStream(tf.constant([1, 2])), True, rate)

    monkeypatch.setattr(layers, "_random_bits", always)


def plant_weight_decay_on_layer_norm(setup, monkeypatch):
    monkeypatch.setattr(setup.trainer.optimizer, "exclude_from_weight_decay",
                        ("layer_norm", "bias"))


def plant_embeddings_one_layer_up(setup, monkeypatch):
    multipliers = setup.trainer.optimizer.lr_multipliers
    decay = setup.trainer.config.layerwise_lr_decay
    for name in multipliers:
        if "/embeddings/" in name or "/embeddings_project/" in name:
            monkeypatch.setitem(multipliers, name, multipliers[name] / decay)


def plant_answerable_weight_1(setup, monkeypatch):
    head = setup.trainer.model.heads[[t for t, _ in FINETUNE_TASKS].index("squad")]
    monkeypatch.setattr(head, "answerable_weight", 1.0)


def test_reference_catches_dropout_at_eval(finetuning, monkeypatch):
    finetuning.reset()
    assert max(finetuning_eval(finetuning).values()) <= 1e-5
    plant_dropout_at_eval(finetuning, monkeypatch)
    assert max(finetuning_eval(finetuning).values()) > 1e-5


@pytest.mark.parametrize("plant, caught_by", [
    (plant_weight_decay_on_layer_norm, "weights"),
    (plant_embeddings_one_layer_up, "weights"),
    (plant_answerable_weight_1, "loss"),
])
def test_reference_catches_a_planted_finetuning_bug(finetuning, no_finetuning_dropout,
                                                     monkeypatch, plant, caught_by):
    assert caught_by not in one_comparison(finetuning, finetuning_step)
    plant(finetuning, monkeypatch)
    assert caught_by in one_comparison(finetuning, finetuning_step)
