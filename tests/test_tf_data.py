"""Every input pipeline runs without tf.data's autotuning: with it, deleting an iterator (after
each held-out eval, fine-tuning epoch, trial, prediction and pass over files) waits for the
autotuning thread's next wake-up, seconds that grow with the run (util/tf_data.py)."""
import tensorflow as tf

import pretrain_fixtures as fx
from finetune import preprocessing, task_builder
from pretrain import input_pipeline
from tests.test_finetune_data import make_config, write_fixtures
from util import tf_data

TUNABLE = ("ParallelMapDatasetV2", "PrefetchDataset", "ParallelInterleaveDatasetV4")


def _autotune_values(dataset: tf.data.Dataset) -> tuple[list, int]:
    """(the op types in the dataset's graph given an AUTOTUNE (-1) argument, the number of nodes
    that could take one)."""
    graph = tf.compat.v1.GraphDef()
    graph.ParseFromString(dataset._as_serialized_graph().numpy())  # pylint: disable=protected-access
    consts = {n.name: list(n.attr["value"].tensor.int64_val) for n in graph.node if n.op == "Const"}
    tunable = [n for n in graph.node if n.op in TUNABLE]
    return [n.op for n in tunable if any(consts.get(name) == [-1] for name in n.input[1:])], \
        len(tunable)


def test_every_input_pipeline_is_untuned_with_fixed_threads(tmp_path):
    data = fx.write_data(str(tmp_path / "pretrain"))
    files = input_pipeline.find_files(f"{data}/pretrain_tfrecords/pretrain_data.tfrecord*")
    write_fixtures(tmp_path)
    config = make_config(tmp_path, ["cola", "sst"])
    pre = preprocessing.Preprocessor(config, task_builder.get_tasks(config))
    assert pre.trimmer.enabled  # the bucket-cutting map is among the nodes checked
    train = pre.prepare_train()
    pipelines = {
        "pre-training stream": input_pipeline.train_dataset(
            files.train, seed=0, global_batch_size=4, max_seq_length=fx.SEQ_LEN),
        "pre-training held-out": input_pipeline.eval_dataset(
            files.eval, global_batch_size=4, max_seq_length=fx.SEQ_LEN, num_batches=2),
        "fine-tuning epoch": pre.train_dataset(train, seed=0, epoch=0),
        "fine-tuning prediction": pre.predict_dataset(train),
        "a pass over files": tf_data.records(files.eval).batch(2)}
    for name, dataset in pipelines.items():
        assert dataset.options().autotune.enabled is False, name
        autotuned, tunable = _autotune_values(dataset)
        assert autotuned == [] and tunable >= (0 if name == "a pass over files" else 2), name
    # Both checks see tf.data's default.
    default = tf.data.Dataset.range(3).prefetch(tf.data.AUTOTUNE)
    assert default.options().autotune.enabled is not False
    assert _autotune_values(default) == (["PrefetchDataset"], 1)
