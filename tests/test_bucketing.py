"""Length buckets (finetune/bucketing.py): batches cut to the bucket of their longest example give
the losses, gradients, predictions and trained weights of full padding up to float rounding."""
import numpy as np
import pytest
import tensorflow as tf

from finetune import bucketing
from finetune import finetuning_model
from finetune import preprocessing
from finetune import task_builder
from finetune import trainer
from finetune.qa.qa_head import MASK_PENALTY as MASK

from tests import test_finetune_data
from tests import test_tagging

NO_DROPOUT = {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}


def test_bucket_lengths():
    assert bucketing.bucket_lengths(128, 32) == [32, 64, 96, 128]
    assert bucketing.bucket_lengths(100, 32) == [32, 64, 96, 100]  # the last one capped
    assert bucketing.bucket_lengths(128, 32, minimum=40) == [40, 64, 96, 128]
    assert bucketing.bucket_lengths(128, 0) == [128]


@pytest.mark.parametrize("as_tensor", [False, True])
def test_a_batch_is_cut_to_the_bucket_of_its_longest_row(as_tensor):
    mask = np.zeros([3, 64], np.int32)
    mask[0, :5], mask[1, :17], mask[2, :3] = 1, 1, 1
    labels = np.arange(3 * 64).reshape(3, 64)
    batch = {"input_ids": mask * 7, "input_mask": mask, "segment_ids": mask * 0,
             "task_id": np.arange(3), "chunk_labels": labels}
    if as_tensor:
        batch = {k: tf.constant(v) for k, v in batch.items()}
    cut = bucketing.Trimmer(64, 16)(batch)
    assert [cut[k].shape[1] for k in bucketing.SEQUENCE_FEATURES] == [32] * 3  # 17 -> 32
    np.testing.assert_array_equal(np.asarray(cut["input_mask"]), mask[:, :32])
    np.testing.assert_array_equal(np.asarray(cut["chunk_labels"]), labels)  # not a position
    assert bucketing.Trimmer(64, 16, minimum=40)(batch)["input_ids"].shape[1] == 40
    assert bucketing.Trimmer(20, 16)(batch)["input_ids"].shape[1] == 20  # capped
    assert bucketing.Trimmer(64, 0)(batch)["input_ids"].shape[1] == 64  # off


def random_batch(specs, n_tasks, rows, max_len, rng):
    """Every feature of `specs` for `rows` rows of random lengths (< max_len / 2), labels and
    positions inside each row's tokens."""
    lengths = rng.integers(3, max_len // 2, rows)
    mask = (np.arange(max_len)[None] < lengths[:, None]).astype(np.int32)
    batch = {}
    for spec in specs:
        shape = [rows] + list(spec.shape)
        if spec.name.endswith(("_positions", "labeled_positions")):
            values = rng.integers(0, lengths[:, None] if spec.shape else lengths, shape)
        elif not spec.is_int_feature:
            values = rng.uniform(0, 1, shape).astype(np.float32)
        else:
            values = rng.integers(0, 2, shape)
        batch[spec.name] = values
    batch.update(input_ids=rng.integers(5, 20, [rows, max_len]) * mask, input_mask=mask,
                 segment_ids=mask * rng.integers(0, 2, [rows, max_len]),
                 task_id=np.arange(rows) % (n_tasks + 1))  # every task and a padding row
    return {k: tf.constant(v, tf.int32 if v.dtype.kind in "iu" else tf.float32)
            for k, v in batch.items()}


@pytest.mark.parametrize("remove_padding", [False, True])
def test_every_head_gives_full_paddings_outputs_loss_and_gradients(tmp_path, remove_padding):
    """Classification, regression, tagging and QA heads on one batch: cut (length 32 of 64),
    with the padding left in or removed (model/token_packing.py), against full padding: the same
    loss (eval and training without dropout), gradients and outputs (QA's per-position logits
    compared where the batch has positions, masked beyond)."""
    config = test_finetune_data.make_config(
        tmp_path, ["sst", "sts", "chunk", "squadv1"], max_seq_length=64, beam_size=5,
        model_hparam_overrides=dict(test_tagging.TINY, **NO_DROPOUT), embedding_size=16,
        pad_to_multiple_of=16)
    tasks = task_builder.get_tasks(config)
    reference = finetuning_model.FinetuningModel(config, tasks, seed=1, remove_padding=False)
    model = finetuning_model.FinetuningModel(config, tasks, seed=1, remove_padding=remove_padding)
    assert model.encoder.remove_padding == remove_padding
    preprocessor = preprocessing.Preprocessor(config, tasks)
    full = random_batch(preprocessor.feature_specs, len(tasks), 10, 64, np.random.default_rng(0))
    cut = preprocessor.trimmer(full)
    assert cut["input_ids"].shape[1] == 32
    (loss_full, out_full), (loss_cut, out_cut) = [m(b, training=False)
                                                  for m, b in ((reference, full), (model, cut))]
    np.testing.assert_allclose(loss_cut.numpy(), loss_full.numpy(), rtol=1e-5)
    with tf.GradientTape(persistent=True) as tape:
        losses = [m(b, training=True, seed=tf.constant([1, 2]))[0]
                  for m, b in ((reference, full), (model, cut))]
    np.testing.assert_allclose(losses[1].numpy(), losses[0].numpy(), rtol=1e-5)
    grads = [tape.gradient(loss, m.trainable_variables)
             for m, loss in zip((reference, model), losses)]
    for g_full, g_cut in zip(*grads):
        np.testing.assert_allclose(tf.convert_to_tensor(g_cut).numpy(),
                                   tf.convert_to_tensor(g_full).numpy(), rtol=1e-4, atol=1e-6)
    outputs = {(task.name, name): (out_cut[task.name][name].numpy(), value.numpy())
               for task in tasks for name, value in out_full[task.name].items()}
    # QA's beam search: where a row has fewer answer positions than the beam, the rest of the
    # beam holds masked positions (log-probability about -1000), which n-best search drops and
    # which differ with the batch's length; the real candidates must agree.
    start_real = outputs[("squadv1", "start_top_log_probs")][1] > -MASK / 2
    end_real = (outputs[("squadv1", "end_top_log_probs")][1] > -MASK / 2) & start_real[..., None]
    np.testing.assert_array_equal(outputs[("squadv1", "start_top_log_probs")][0] > -MASK / 2,
                                  start_real)
    for (task, name), (got, want) in outputs.items():
        assert got.shape == want.shape, name  # per-position outputs padded back
        if name in ("start_logits", "end_logits"):
            if name == "start_logits":
                assert (got[:, 32:] <= -MASK).all()  # masked beyond the batch's length
            got, want = got[:, :32], want[:, :32]
            # Masked positions hold about -1000 plus what the encoder left at padding (the
            # padded layout's leftovers, zeros with the padding removed): open positions agree.
            open_positions = want > -MASK / 2
            np.testing.assert_array_equal(got > -MASK / 2, open_positions, err_msg=name)
            got, want = got[open_positions], want[open_positions]
        elif name.startswith("start_top"):
            got, want = got[start_real], want[start_real]
        elif name.startswith("end_top"):
            got, want = got[end_real], want[end_real]
        if got.dtype.kind == "f":
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=name)
        else:
            np.testing.assert_array_equal(got, want, err_msg=name)
    assert start_real.any() and (~start_real).any()


def make_runner(root, multiple, trial=1):
    """Full padding (multiple 0) as the official release lays it out; buckets with the padding
    removed inside the encoder, as by default."""
    config = test_tagging.make_config(
        root, pad_to_multiple_of=multiple, remove_padding=multiple > 0, max_seq_length=32,
        train_batch_size=2,
        eval_batch_size=2, num_train_epochs=2.0, learning_rate=1e-3,
        model_hparam_overrides=dict(test_tagging.TINY, **NO_DROPOUT),
        model_dir=str(root / f"model_{multiple}"), results_txt=str(root / "r" / "results.txt"),
        preprocessed_data_dir=str(root / f"records_{multiple}"))
    tasks = task_builder.get_tasks(config)
    preprocessor = preprocessing.Preprocessor(config, tasks)
    runner = trainer.ModelRunner(config, tasks, preprocessor, trial)
    runner.initialize()
    return runner


def test_training_and_predictions_equal_full_padding(tmp_path):
    """A chunking trial trained and evaluated with buckets of 8 (padding removed in the encoder)
    and with full padding (32) in the padded layout: the same batches, weights and per-word
    predictions, up to float rounding."""
    runners = {m: make_runner(tmp_path, m) for m in (0, 8)}
    assert [r.model.encoder.remove_padding for r in runners.values()] == [False, True]
    data = runners[8].train_data
    cut = runners[8].preprocessor.train_dataset(data, seed=1, epoch=0)
    full = runners[0].preprocessor.train_dataset(runners[0].train_data, seed=1, epoch=0)
    widths = []
    for a, b in zip(cut, full):
        widths.append(a["input_ids"].shape[1])
        np.testing.assert_array_equal(a["input_ids"].numpy(), b["input_ids"].numpy()[:, :widths[-1]])
        np.testing.assert_array_equal(b["input_ids"].numpy()[:, widths[-1]:], 0)
    assert max(widths) < 32 and set(widths) <= {8, 16, 24}
    for runner in runners.values():
        runner.train()
    for a, b in zip(runners[8].model.trainable_variables, runners[0].model.trainable_variables):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-4, atol=1e-5, err_msg=a.name)
    task = runners[8].tasks[0]
    rows = {m: r.predict(task, "dev") for m, r in runners.items()}
    for a, b in zip(rows[8], rows[0]):
        np.testing.assert_array_equal(a["predictions"], b["predictions"])
        np.testing.assert_allclose(a["loss"], b["loss"], rtol=1e-4)
