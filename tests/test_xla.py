"""use_xla, the default on GPUs and TPUs (the step's gradients compiled whole by XLA), run on the
CPU: pre-training and fine-tuning against graph mode, exact resume, bfloat16, float16 loss
scaling, and the pre-training step lowered with static shapes and no host work, as a TPU needs.

What is not tested here: a real TPU or GPU (their XLA back ends, TPUStrategy's replication).

Each XLA run compiles its step once, which costs most of this file's time, so the runs are
module fixtures shared between the assertions: the smallest model (hidden 16, 1 layer, 4
sequences of 16 tokens) and 3 steps. Compiling one step took 50-130 s on the shared 2-core
machine under load (TF_CPP_VMODULE=device_compilation_profiler=3 logs it); the file took 172
CPU-seconds (pytest --durations=0 under /usr/bin/time). Figures measured while writing (tolerances are set a few
times above them) are in the comments at each assertion.
"""
import re

import numpy as np
import pytest
import tensorflow as tf

import pretrain_fixtures as fx
import run_finetuning
from configure_pretraining import PretrainingConfig
from finetune import trainer as finetune_trainer
from pretrain import input_pipeline, masking
from pretrain.trainer import Trainer
from util import checkpoint, loss_scale
from util import training_utils as tu

from tests.test_finetune_data import make_config, write_fixtures

SPECIAL = masking.SpecialIds(pad=fx.PAD, cls=fx.CLS, sep=fx.SEP, mask=fx.MASK)
TINY = dict(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
            max_position_embeddings=16)
STEPS = 3


def _pretrain_config(data_dir, **overrides) -> PretrainingConfig:
    return PretrainingConfig.from_hparams("m", data_dir, fx.tiny_hparams(
        model_hparam_overrides=TINY, embedding_size=8, train_batch_size=4,
        num_train_steps=STEPS, **overrides))


def _train(trainer: Trainer, steps: int) -> list:
    """One call per step, so each step's metrics are seen; the loop is compiled once."""
    files = input_pipeline.find_files(trainer.config.pretrain_tfrecords)
    iterator = trainer.train_iterator(files.train)
    results = [trainer.train_steps(iterator, 1) for _ in range(steps)]
    assert all(r.finite and r.steps_run == 1 for r in results)
    return results


def _losses(results) -> np.ndarray:
    return np.array([[r.metrics["loss"], r.metrics["mlm_loss"], r.metrics["disc_loss"]]
                     for r in results])


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    return fx.write_data(str(tmp_path_factory.mktemp("data")))


@pytest.fixture(scope="module")
def graph_run(data_dir):
    trainer = Trainer(_pretrain_config(data_dir), SPECIAL, use_xla=False)
    return _losses(_train(trainer, STEPS)), trainer.checkpoint_tensors()


@pytest.fixture(scope="module")
def xla_run(data_dir, tmp_path_factory):
    """STEPS steps, and the last STEPS - 1 again after restoring the checkpoint of step 1 (the
    same trainer: its compiled step is reused, its state all comes from the checkpoint)."""
    trainer = Trainer(_pretrain_config(data_dir), SPECIAL, use_xla=True)
    assert trainer.use_xla
    first = _train(trainer, 1)
    saved = checkpoint.save_tensors(str(tmp_path_factory.mktemp("xla") / "model.ckpt-1"),
                                    trainer.checkpoint_tensors())
    rest = _train(trainer, STEPS - 1)
    straight = trainer.checkpoint_tensors()
    trainer.restore(saved)
    resumed = _train(trainer, STEPS - 1)
    return {"losses": _losses(first + rest), "tensors": straight,
            "resumed_losses": _losses(resumed), "resumed_tensors": trainer.checkpoint_tensors()}


def test_xla_pretraining_computes_what_graph_mode_computes(graph_run, xla_run):
    # The same masks, dropout and generator samples (pretrain/rng.py makes the floats from the
    # bits as the CPU kernel does), so only float32 rounding differs. Measured: the 3 steps'
    # losses (total, generator, discriminator) within 2.0e-7 relative, the weights and Adam
    # slots within 3.0e-8.
    graph_losses, graph_tensors = graph_run
    np.testing.assert_allclose(xla_run["losses"], graph_losses, rtol=1e-6)
    assert sorted(xla_run["tensors"]) == sorted(graph_tensors)
    for name, value in graph_tensors.items():
        np.testing.assert_allclose(xla_run["tensors"][name], value, rtol=0, atol=3e-7,
                                   err_msg=name)


def test_xla_resumes_exactly(xla_run):
    # Bit-identical: the same compiled program on the same state gives the same numbers.
    np.testing.assert_array_equal(xla_run["resumed_losses"], xla_run["losses"][1:])
    for name, value in xla_run["tensors"].items():
        np.testing.assert_array_equal(xla_run["resumed_tensors"][name], value, err_msg=name)


@pytest.fixture(scope="module")
def bfloat16_run(data_dir):
    trainer = Trainer(_pretrain_config(data_dir, compute_dtype="bfloat16"), SPECIAL, use_xla=True)
    return _losses(_train(trainer, STEPS)), trainer.checkpoint_tensors()


def test_xla_pretraining_in_bfloat16_tracks_float32(graph_run, bfloat16_run):
    # bfloat16 compute, float32 weights. Measured against graph mode in float32: losses within
    # 6.6e-5 relative, weights and slots within 1.4e-4.
    graph_losses, graph_tensors = graph_run
    losses, tensors = bfloat16_run
    np.testing.assert_allclose(losses, graph_losses, rtol=3e-4)
    for name, value in graph_tensors.items():
        np.testing.assert_allclose(tensors[name], value, rtol=0, atol=6e-4, err_msg=name)
    assert {v.dtype for v in tensors.values()} == {np.dtype(np.float32), np.dtype(np.int64)}


def test_xla_pretraining_in_float16_scales_the_loss(data_dir, graph_run):
    trainer = Trainer(_pretrain_config(data_dir, compute_dtype="float16"), SPECIAL, use_xla=True)
    assert trainer.loss_scale.numpy() == loss_scale.INITIAL_SCALE
    # From the initial 2^15 this model's first steps overflow (measured: 4 skipped in a row);
    # at 2^4 none does, and the steps are the float32 steps with float16 rounding. Measured
    # against graph mode in float32: losses within 5.9e-6 relative, weights and slots within
    # 1.9e-5.
    trainer.loss_scale.assign(2.0 ** 4)
    losses = _losses(_train(trainer, STEPS))
    graph_losses, graph_tensors = graph_run
    tensors = trainer.checkpoint_tensors()
    assert trainer.global_step == STEPS and trainer.loss_scale.numpy() == 2.0 ** 4
    np.testing.assert_allclose(losses, graph_losses, rtol=3e-5)
    for name, value in graph_tensors.items():
        if "loss_scale" not in name:
            np.testing.assert_allclose(tensors[name], value, rtol=0, atol=1e-4, err_msg=name)
    # An overflowing scale: the compiled step skips the update and halves the scale.
    trainer.loss_scale.assign(1e38)
    kernel = trainer.model_vars["electra/encoder/layer_0/attention/self/query/kernel"]
    before = kernel.numpy()
    files = input_pipeline.find_files(trainer.config.pretrain_tfrecords)
    skipped = trainer.train_steps(trainer.train_iterator(files.train), 1)
    assert skipped.finite and skipped.steps_run == 1 and skipped.steps_applied == 0
    assert trainer.global_step == STEPS and trainer.loss_scale.numpy() == pytest.approx(5e37)
    np.testing.assert_array_equal(kernel.numpy(), before)


# Ops that run on the host, not the accelerator: Python callbacks, printing, strings.
_HOST_OPS = re.compile(r"PyFunc|EagerPyFunc|NumpyFunction|Print|String|Iterator|Summary|Write")


def _op_types(graph: tf.Graph) -> set[str]:
    """Op types of the graph and of every function it calls."""
    graph_def = graph.as_graph_def()
    types = {node.op for node in graph_def.node}
    for function in graph_def.library.function:
        types |= {node.op for node in function.node_def}
    return types


def test_the_pretraining_step_lowers_with_static_shapes_and_no_host_work(data_dir):
    """What a TPU compiles for each replica (the step engine's replica step, then the update)
    lowers to XLA from the input signature alone, so no input has to be a compile-time constant
    (the step compiles once, not once per batch, as it did while the fused loss's gradient read
    a gather axis from the forward block); every shape in the program is static; nothing in it
    runs on the host."""
    trainer = Trainer(_pretrain_config(data_dir, gradient_accumulation_steps=2), SPECIAL,
                      use_xla=True)
    files = input_pipeline.find_files(trainer.config.pretrain_tfrecords)
    spec = trainer.train_iterator(files.train).element_spec
    assert all(s.shape.is_fully_defined() for s in spec.values()), spec  # static batches
    names = sorted(spec)

    def replica_step(*tensors):
        grads, values = trainer.engine._replica_step(dict(zip(names, tensors)))
        trainer.engine._apply(grads, values)
        return values

    step = tf.function(replica_step, jit_compile=True, autograph=False)
    specs = [spec[name] for name in names]
    hlo = step.experimental_get_compiler_ir(*specs)(stage="hlo")
    assert "ENTRY" in hlo
    assert not re.search(r"\[[^\]]*<=", hlo)  # no bounded-dynamic dimension
    assert not re.search(r"\b(send|recv|infeed|outfeed|custom-call)\(", hlo)
    assert not re.search(r"\bf64\[", hlo)  # TPUs have no float64
    types = _op_types(step.get_concrete_function(*specs).graph)
    assert not {t for t in types if _HOST_OPS.search(t)}, types


def _finetune(root, **hparams):
    """3 steps on CoLA (3 examples in batches of 2: 2 steps an epoch), the loss of every step
    and the trial's final checkpoint."""
    write_fixtures(root, tasks={"cola"})
    config = make_config(root, ["cola"], model_hparam_overrides=TINY, embedding_size=8,
                         train_batch_size=2, num_train_epochs=1.5, learning_rate=1e-3,
                         adam_bias_correction=True, iterations_per_loop=1, do_eval=False,
                         pad_to_multiple_of=4, **hparams)  # batches cut to 8 of 16 positions
    run_finetuning.run_finetuning(config)
    trial_dir = finetune_trainer.trial_dir(config, 1)
    losses = [value for _, value in tu.read_scalars(trial_dir)["train/loss"]]
    return np.array(losses), checkpoint.read_all(trial_dir)


@pytest.fixture(scope="module")
def finetune_graph(tmp_path_factory):
    # The padded layout, as XLA keeps it (removing padding would draw dropout for other shapes).
    return _finetune(tmp_path_factory.mktemp("ft_graph"), use_xla=False, remove_padding=False)


@pytest.fixture(scope="module")
def finetune_xla(tmp_path_factory):
    return _finetune(tmp_path_factory.mktemp("ft_xla"), use_xla=True)


def test_xla_finetuning_computes_what_graph_mode_computes(finetune_graph, finetune_xla):
    # Measured: losses within 2.2e-7 relative, weights and slots within 1.2e-8.
    (graph_losses, graph_tensors), (xla_losses, xla_tensors) = finetune_graph, finetune_xla
    assert len(graph_losses) == STEPS and graph_tensors["global_step"] == STEPS
    np.testing.assert_allclose(xla_losses, graph_losses, rtol=1e-6)
    assert sorted(xla_tensors) == sorted(graph_tensors)
    for name, value in graph_tensors.items():
        np.testing.assert_allclose(xla_tensors[name], value, rtol=0, atol=1e-7, err_msg=name)
