"""Name-based checkpoints: official keys, atomic writes, retention, torn-file fallback, restore."""
import os

import numpy as np
import pytest
import tensorflow as tf

from util import checkpoint


def variables():
    return {"electra/encoder/layer_0/attention/self/query/kernel":
            tf.Variable(np.arange(6, dtype=np.float32).reshape(2, 3)),
            "global_step": tf.Variable(np.int64(7))}


def test_keys_are_plain_official_names(tmp_path):
    prefix = checkpoint.save_tensors(str(tmp_path / "model.ckpt-7"), variables())
    assert dict(tf.train.list_variables(prefix)) == {
        "electra/encoder/layer_0/attention/self/query/kernel": [2, 3], "global_step": []}
    assert not [f for f in os.listdir(tmp_path) if f.startswith(".tmp")]


def test_manager_keeps_newest_and_writes_state_file(tmp_path):
    manager = checkpoint.CheckpointManager(str(tmp_path), max_to_keep=2)
    for step in (1, 2, 3):
        manager.save(variables(), step)
    assert tf.train.latest_checkpoint(str(tmp_path)).endswith("model.ckpt-3")
    assert not os.path.exists(tmp_path / "model.ckpt-1.index")
    assert manager.latest().endswith("model.ckpt-3")


def test_pruning_never_removes_the_checkpoint_just_saved(tmp_path):
    # A higher-numbered checkpoint left by an earlier run (e.g. damaged, so this run resumed
    # from an older one) must not push the new save out.
    checkpoint.CheckpointManager(str(tmp_path), max_to_keep=3).save(variables(), 9)
    manager = checkpoint.CheckpointManager(str(tmp_path), max_to_keep=1)
    assert manager.save(variables(), 4).endswith("model.ckpt-4")
    assert os.path.exists(tmp_path / "model.ckpt-4.index")
    assert not os.path.exists(tmp_path / "model.ckpt-9.index")
    assert tf.train.latest_checkpoint(str(tmp_path)).endswith("model.ckpt-4")


def test_max_to_keep_zero_keeps_all_and_negative_is_refused(tmp_path):
    manager = checkpoint.CheckpointManager(str(tmp_path), max_to_keep=0)
    for step in (1, 2, 3):
        manager.save(variables(), step)
    assert all(os.path.exists(tmp_path / f"model.ckpt-{s}.index") for s in (1, 2, 3))
    for bad in (-1, 1.5, True, None):
        with pytest.raises(ValueError, match=r"max_to_keep must be an int >= 0"):
            checkpoint.CheckpointManager(str(tmp_path), max_to_keep=bad)


@pytest.mark.parametrize("damage", ["truncate_data", "delete_index"])
def test_torn_latest_checkpoint_falls_back_to_previous(tmp_path, damage, caplog):
    manager = checkpoint.CheckpointManager(str(tmp_path), max_to_keep=3)
    manager.save(variables(), 1)
    manager.save(variables(), 2)
    if damage == "truncate_data":
        with open(tmp_path / "model.ckpt-2.data-00000-of-00001", "r+b") as f:
            f.truncate(4)
    else:
        os.remove(tmp_path / "model.ckpt-2.index")
    assert manager.latest().endswith("model.ckpt-1")
    if damage == "truncate_data":
        assert "model.ckpt-2 is unreadable" in caplog.text


def test_restore_by_name_reports_and_checks_shapes(tmp_path):
    prefix = checkpoint.save_tensors(str(tmp_path / "c"), variables())
    target = {"electra/encoder/layer_0/attention/self/query/kernel": tf.Variable(tf.zeros([2, 3]))}
    report = checkpoint.restore(target, prefix)
    np.testing.assert_array_equal(target["electra/encoder/layer_0/attention/self/query/kernel"],
                                  np.arange(6).reshape(2, 3))
    assert report.unused == ["global_step"] and report.missing == []
    with pytest.raises(ValueError, match=r"lacks 1 variables the model needs: electra/x"):
        checkpoint.restore({"electra/x": tf.Variable(0.0)}, prefix)
    wrong = {"electra/encoder/layer_0/attention/self/query/kernel": tf.Variable(tf.zeros([3, 3]))}
    with pytest.raises(ValueError, match=r"has shape \[2, 3\] but the model expects \[3, 3\]"):
        checkpoint.restore(wrong, prefix)
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no readable checkpoint in directory"):
        checkpoint.resolve(str(tmp_path / "empty"))


def test_reads_a_tf1_checkpoint_written_with_compat_v1_saver(tmp_path):
    graph = tf.Graph()
    with graph.as_default():
        with tf.compat.v1.variable_scope("electra/embeddings"):
            tf.compat.v1.get_variable("word_embeddings", initializer=tf.ones([3, 2]))
        saver = tf.compat.v1.train.Saver()
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            prefix = saver.save(sess, str(tmp_path / "tf1" / "model.ckpt"))
    target = {"electra/embeddings/word_embeddings": tf.Variable(tf.zeros([3, 2]))}
    checkpoint.restore(target, str(tmp_path / "tf1"))
    np.testing.assert_array_equal(target["electra/embeddings/word_embeddings"], np.ones([3, 2]))
    assert prefix.endswith("model.ckpt")


def test_state_file_naming_a_remote_path_finds_the_local_checkpoint(tmp_path, caplog):
    checkpoint.save_tensors(str(tmp_path / "electra_small"), variables())
    (tmp_path / "checkpoint").write_text(
        'model_checkpoint_path: "gs://electra-data/models/electra_small"\n')
    assert checkpoint.resolve(str(tmp_path)) == str(tmp_path / "electra_small")
    assert "unreadable" not in caplog.text
