"""FinetuningModel: head variable names, multi-task loss masking, loading pre-trained weights."""
import numpy as np
import pytest
import tensorflow as tf

from finetune import finetuning_model
from finetune import task_builder
from model import modeling
from model import optimization
from util import checkpoint

from tests.test_finetune_data import make_config

TINY = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
        "intermediate_size": 64, "max_position_embeddings": 32}


def build(tmp_path, tasks=("sst", "sts"), **hparams):
    config = make_config(tmp_path, tasks, model_hparam_overrides=TINY, embedding_size=16,
                         **hparams)
    tasks = task_builder.get_tasks(config)
    return config, tasks, finetuning_model.FinetuningModel(config, tasks, seed=3)


def batch(config, task_ids, seed=0):
    rng = np.random.default_rng(seed)
    b, length = len(task_ids), config.max_seq_length
    mask = np.ones([b, length], np.int32)
    mask[:, length // 2:] = 0
    return {
        "input_ids": tf.constant(rng.integers(5, 20, [b, length]) * mask, tf.int32),
        "input_mask": tf.constant(mask),
        "segment_ids": tf.zeros([b, length], tf.int32),
        "task_id": tf.constant(task_ids, tf.int32),
        "sst_label_ids": tf.constant(rng.integers(0, 2, [b]), tf.int32),
        "sst_eid": tf.range(b),
        "sts_targets": tf.constant(rng.uniform(0, 1, [b]), tf.float32),
        "sts_eid": tf.range(b),
    }


def test_head_variable_names_mirror_the_official_scopes(tmp_path):
    _, _, model = build(tmp_path)
    heads = {checkpoint.checkpoint_name(v): v.shape.as_list() for v in model.variables
             if v.name.startswith("task_specific/")}
    # tf.layers.dense inside variable_scope("task_specific/<task>") in the official release.
    assert heads == {"task_specific/sst/dense/kernel": [32, 2], "task_specific/sst/dense/bias": [2],
                     "task_specific/sts/dense/kernel": [32, 1], "task_specific/sts/dense/bias": [1]}
    others = [checkpoint.checkpoint_name(v) for v in model.variables
              if not v.name.startswith("task_specific/")]
    assert others and all(n.startswith("electra/") for n in others)
    assert "electra/embeddings_project/kernel" in others


def test_heads_get_the_top_layerwise_learning_rate(tmp_path):
    _, _, model = build(tmp_path)
    multipliers = optimization.layerwise_lr_multipliers(model.trainable_variables, 0.8, 2)
    assert multipliers["task_specific/sst/dense/kernel"] == 1.0
    assert multipliers["electra/encoder/layer_1/output/dense/kernel"] == pytest.approx(0.8 ** 2)
    assert multipliers["electra/embeddings/word_embeddings"] == pytest.approx(0.8 ** 4)


def test_loss_sums_each_rows_own_task_and_skips_padding(tmp_path):
    config, _, model = build(tmp_path)
    features = batch(config, [0, 1, 2, 0])  # sst, sts, padding, sst
    loss, outputs = model(features, training=False)
    sst = outputs["sst"]["loss"].numpy()
    sts = outputs["sts"]["loss"].numpy()
    assert loss.numpy() == pytest.approx(sst[0] + sts[1] + sst[3], rel=1e-5)
    assert outputs["sst"]["logits"].shape == [4, 2]
    assert outputs["sts"]["predictions"].shape == [4]
    np.testing.assert_array_equal(outputs["task_id"].numpy(), [0, 1, 2, 0])
    # Softmax cross-entropy and squared error, per row.
    logits = outputs["sst"]["logits"].numpy()
    labels = features["sst_label_ids"].numpy()
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    np.testing.assert_allclose(sst, -log_probs[np.arange(4), labels], rtol=1e-5)
    np.testing.assert_allclose(
        sts, (outputs["sts"]["predictions"].numpy() - features["sts_targets"].numpy()) ** 2,
        rtol=1e-5)


def test_dropout_only_in_training_and_seeded(tmp_path):
    config, _, model = build(tmp_path)
    features = batch(config, [0, 0, 1, 1])
    eval_a, _ = model(features, training=False)
    eval_b, _ = model(features, training=False)
    assert eval_a.numpy() == eval_b.numpy()
    seed = tf.constant([1, 2], tf.int64)
    train_a, _ = model(features, training=True, seed=seed)
    train_b, _ = model(features, training=True, seed=seed)
    train_c, _ = model(features, training=True, seed=tf.constant([1, 3], tf.int64))
    assert train_a.numpy() == train_b.numpy()
    assert train_a.numpy() != train_c.numpy()


def test_restore_pretrained_loads_the_encoder_and_ignores_the_rest(tmp_path):
    config, _, model = build(tmp_path)
    source = modeling.BertModel(model.bert_config, scope="electra", seed=99)
    tensors = {checkpoint.checkpoint_name(v): v.numpy() for v in source.variables}
    # What a pre-training checkpoint holds besides the discriminator encoder.
    tensors["generator/encoder/layer_0/output/dense/kernel"] = np.zeros([2, 2], np.float32)
    tensors["discriminator_predictions/dense/kernel"] = np.zeros([2, 2], np.float32)
    tensors["electra/encoder/layer_0/output/dense/kernel/adam_m"] = np.zeros([64, 32], np.float32)
    tensors["global_step"] = np.int64(1000)
    prefix = checkpoint.save_tensors(str(tmp_path / "pretrained" / "model.ckpt-1000"), tensors)
    head_before = model.heads[0].dense.kernel.numpy()

    report = model.restore_pretrained(str(tmp_path / "pretrained"))  # a directory works too
    assert report.path == prefix
    assert len(report.restored) == len(source.variables)
    assert len(report.unused) == 4
    for v in model.encoder.variables:
        np.testing.assert_array_equal(v.numpy(), tensors[checkpoint.checkpoint_name(v)])
    np.testing.assert_array_equal(model.heads[0].dense.kernel.numpy(), head_before)


def test_restore_pretrained_lists_missing_encoder_variables(tmp_path):
    config, _, model = build(tmp_path)
    tensors = {checkpoint.checkpoint_name(v): v.numpy() for v in model.encoder.variables}
    del tensors["electra/encoder/layer_1/attention/self/key/bias"]
    prefix = checkpoint.save_tensors(str(tmp_path / "partial" / "model.ckpt-1"), tensors)
    with pytest.raises(ValueError, match="electra/encoder/layer_1/attention/self/key/bias"):
        model.restore_pretrained(prefix)
    with pytest.raises(ValueError, match=r"init_checkpoint: .*random weights"):
        model.restore_pretrained(str(tmp_path / "nowhere"))


def test_max_seq_length_beyond_position_embeddings_is_refused(tmp_path):
    with pytest.raises(ValueError, match="max_seq_length"):
        build(tmp_path, max_seq_length=64)


def test_head_kernels_use_tf1_glorot_uniform_init(tmp_path):
    config, tasks, model = build(tmp_path)
    kernel = model.heads[0].dense.kernel.numpy()  # [32, 2]
    limit = np.sqrt(6.0 / (32 + 2))
    assert np.abs(kernel).max() <= limit and np.abs(kernel).max() > 0.5 * limit
    assert not model.heads[0].dense.bias.numpy().any()
    again = finetuning_model.FinetuningModel(config, tasks, seed=3)
    other = finetuning_model.FinetuningModel(config, tasks, seed=4)
    np.testing.assert_array_equal(again.heads[0].dense.kernel.numpy(), kernel)
    assert not np.array_equal(other.heads[0].dense.kernel.numpy(), kernel)


def test_model_runs_unconverted_under_autograph_with_the_same_outputs(tmp_path):
    """Evaluation's predict step is a default tf.function (autograph on): the model is called
    as plain Python (no source conversion of every layer, which doubled its tracing time) and
    computes exactly what it computes eagerly."""
    from tensorflow.python.autograph.impl import api as autograph_api
    assert autograph_api.is_autograph_artifact(finetuning_model.FinetuningModel.__call__)
    assert autograph_api.is_autograph_artifact(modeling.BertModel.__call__)
    config, _, model = build(tmp_path)
    features = batch(config, [0, 1, 2])
    eager_loss, eager = model(features, training=False)
    graph_loss, graph = tf.function(lambda f: model(f, training=False))(features)
    np.testing.assert_array_equal(graph_loss.numpy(), eager_loss.numpy())
    for task in ("sst", "sts"):
        for key, value in eager[task].items():
            np.testing.assert_allclose(graph[task][key].numpy(), value.numpy(), rtol=1e-6,
                                       atol=1e-6, err_msg=f"{task} {key}")
