"""GLUE readers on fixtures of every layout, featurization, the feature cache and input errors."""
import os

import numpy as np
import pytest
import tensorflow as tf

import configure_finetuning
from finetune import preprocessing
from finetune import task as task_lib
from finetune import task_builder
from finetune.classification import glue_data

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "a", "cat", "dog", "sat", "is",
         "good", "bad", "movie", "he", "said", "ran", "?", ".", '"', "why", "how", "##s"]

# task dir -> file -> content. Column layouts as the GLUE download gives them.
FIXTURES = {
    "cola": {  # no header in train/dev: source, label, original label, sentence
        "train.tsv": "gj04\t1\t\tThe cat sat .\ngj04\t0\t*\tcat the sat .\ngj04\t1\t\tThe dog ran .\n",
        "dev.tsv": "gj04\t1\t\tThe dog sat .\ngj04\t0\t*\tsat sat dog .\n",
        "test.tsv": "index\tsentence\n0\tThe cat ran .\n1\tran the .\n",
    },
    "sst": {
        "train.tsv": "sentence\tlabel\nthe movie is good \t1\nthe movie is bad \t0\n",
        "dev.tsv": "sentence\tlabel\na good movie \t1\n",
        "test.tsv": "index\tsentence\n0\ta bad movie .\n",
    },
    "mrpc": {  # BOM, and unbalanced quote characters that a CSV reader would merge across lines
        "train.tsv": '\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String\n'
                     '1\t11\t12\tHe said "the cat sat .\tThe cat sat .\n'
                     '0\t13\t14\tThe dog ran .\t"The cat sat .\n'
                     '1\t15\t16\tThe dog sat .\tA dog sat .\n',
        "dev.tsv": '\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String\n1\t1\t2\ta cat .\ta cat .\n',
        "test.tsv": "index\t#1 ID\t#2 ID\t#1 String\t#2 String\n0\t1\t2\ta dog .\tthe dog .\n",
    },
    "sts": {
        "train.tsv": "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore\n"
                     "0\tmain-captions\tMSRvid\t2012test\t0001\tnone\tnone\tA cat sat .\tA cat sat .\t5.000\n"
                     "1\tmain-captions\tMSRvid\t2012test\t0004\tnone\tnone\tA dog ran .\tThe cat sat .\t0.500\n",
        "dev.tsv": "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore\n"
                   "0\tmain-captions\tMSRvid\t2012test\t0000\tnone\tnone\tA dog .\tA dog .\t4.750\n",
        "test.tsv": "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\n"
                    "0\tmain-captions\tMSRvid\t2012test\t0024\tnone\tnone\tA cat .\tA dog .\n",
    },
    "qqp": {
        "train.tsv": "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n"
                     "7\t1\t2\twhy is the cat good ?\thow is the cat good ?\t1\n"
                     "8\t3\t4\twhy the dog ?\thow the movie ?\t0\n",
        "dev.tsv": "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n"
                   "9\t5\t6\twhy ?\thow ?\t0\n",
        "test.tsv": "id\tquestion1\tquestion2\n0\twhy cat ?\thow cat ?\n",
    },
    "mnli": {
        "train.tsv": "index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse\t"
                     "sentence1_parse\tsentence2_parse\tsentence1\tsentence2\tlabel1\tgold_label\n"
                     "0\t1\t1n\tgov\t(x)\t(y)\t(X)\t(Y)\tThe cat sat .\tA cat sat .\tentailment\tentailment\n"
                     "1\t2\t2c\tgov\t(x)\t(y)\t(X)\t(Y)\tThe cat sat .\tThe dog ran .\tneutral\tcontradiction\n",
        "dev_matched.tsv": "index\tpromptID\tpairID\tgenre\ts1bp\ts2bp\ts1p\ts2p\tsentence1\tsentence2\t"
                           "label1\tlabel2\tlabel3\tlabel4\tlabel5\tgold_label\n"
                           "0\t1\t1n\tgov\tx\ty\tX\tY\tA dog .\tA cat .\tneutral\tneutral\tneutral\t"
                           "neutral\tneutral\tneutral\n",
        "dev_mismatched.tsv": "index\tpromptID\tpairID\tgenre\ts1bp\ts2bp\ts1p\ts2p\tsentence1\tsentence2\t"
                              "label1\tlabel2\tlabel3\tlabel4\tlabel5\tgold_label\n"
                              "0\t1\t1n\tgov\tx\ty\tX\tY\tA movie .\tA cat .\tcontradiction\t-\t-\t-\t-\t"
                              "contradiction\n"
                              "1\t2\t2n\tgov\tx\ty\tX\tY\tA movie .\tA movie .\tentailment\t-\t-\t-\t-\t"
                              "entailment\n",
        "test_matched.tsv": "index\tpromptID\tpairID\tgenre\ts1bp\ts2bp\ts1p\ts2p\tsentence1\tsentence2\n"
                            "0\t1\t1\tgov\tx\ty\tX\tY\tA cat .\tA dog .\n",
        "test_mismatched.tsv": "index\tpromptID\tpairID\tgenre\ts1bp\ts2bp\ts1p\ts2p\tsentence1\tsentence2\n"
                               "5\t1\t1\tgov\tx\ty\tX\tY\tA dog .\tA dog .\n",
    },
    "qnli": {
        "train.tsv": "index\tquestion\tsentence\tlabel\n0\twhy the cat ?\tthe cat sat .\tentailment\n",
        "dev.tsv": "index\tquestion\tsentence\tlabel\n0\thow ?\tthe dog ran .\tnot_entailment\n",
        "test.tsv": "index\tquestion\tsentence\n0\twhy ?\tthe dog .\n",
    },
    "rte": {
        "train.tsv": "index\tsentence1\tsentence2\tlabel\n0\tThe cat sat .\tA cat sat .\tentailment\n",
        "dev.tsv": "index\tsentence1\tsentence2\tlabel\n0\tThe dog .\tA cat .\tnot_entailment\n",
        "test.tsv": "index\tsentence1\tsentence2\n0\tThe dog .\tA dog .\n",
    },
    "wnli": {
        "train.tsv": "index\tsentence1\tsentence2\tlabel\n0\tThe cat sat . he ran .\tThe cat ran .\t1\n",
        "dev.tsv": "index\tsentence1\tsentence2\tlabel\n0\tThe dog .\tA cat .\t0\n",
        "test.tsv": "index\tsentence1\tsentence2\n0\tThe dog .\tA dog .\n",
    },
}


def write_fixtures(root, tasks=None, rename=None):
    for task, files in FIXTURES.items():
        if tasks is not None and task not in tasks:
            continue
        directory = root / "finetuning_data" / (rename or {}).get(task, task)
        directory.mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            (directory / name).write_text(text, encoding="utf-8")


def make_config(tmp_path, tasks, **hparams):
    vocab = tmp_path / "vocab.txt"
    if not vocab.exists():
        vocab.write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
    values = dict(task_names=list(tasks), vocab_size=len(VOCAB), max_seq_length=16,
                  init_checkpoint="", train_batch_size=4, eval_batch_size=4)
    values.update(hparams)
    return configure_finetuning.FinetuningConfig.from_hparams("m", str(tmp_path), values)


def get_task(tmp_path, name, **hparams):
    config = make_config(tmp_path, [name], **hparams)
    return task_builder.get_tasks(config)[0]


@pytest.fixture
def glue(tmp_path):
    write_fixtures(tmp_path)
    return tmp_path


# -- readers --------------------------------------------------------------------------------------

@pytest.mark.parametrize("task_name, split, expected", [
    ("cola", "train", [("The cat sat .", None, "1"), ("cat the sat .", None, "0"),
                       ("The dog ran .", None, "1")]),
    ("cola", "test", [("The cat ran .", None, "0"), ("ran the .", None, "0")]),
    ("sst", "train", [("the movie is good", None, "1"), ("the movie is bad", None, "0")]),
    ("mrpc", "dev", [("a cat .", "a cat .", "1")]),
    ("qqp", "dev", [("why ?", "how ?", "0")]),
    ("qqp", "test", [("why cat ?", "how cat ?", "0")]),
    ("sts", "dev", [("A dog .", "A dog .", 4.75)]),
    ("sts", "test", [("A cat .", "A dog .", 0.0)]),
    ("mnli", "train", [("The cat sat .", "A cat sat .", "entailment"),
                       ("The cat sat .", "The dog ran .", "contradiction")]),
    ("mnli", "dev_mismatched", [("A movie .", "A cat .", "contradiction"),
                                ("A movie .", "A movie .", "entailment")]),
    ("mnli", "test_mismatched", [("A dog .", "A dog .", "contradiction")]),
    ("qnli", "dev", [("how ?", "the dog ran .", "not_entailment")]),
    ("rte", "train", [("The cat sat .", "A cat sat .", "entailment")]),
    ("wnli", "dev", [("The dog .", "A cat .", "0")]),
])
def test_readers_on_each_layout(glue, task_name, split, expected):
    task = get_task(glue, task_name, double_unordered=False)
    examples = task.get_examples(split)
    assert [(e.text_a, e.text_b, e.label) for e in examples] == expected
    assert all(e.task_name == task_name for e in examples)


def test_test_split_ids_come_from_the_index_column(glue):
    task = get_task(glue, "mnli")
    assert [e.eid for e in task.get_examples("test_mismatched")] == [5]
    assert [e.eid for e in get_task(glue, "cola").get_examples("test")] == [0, 1]


def test_mrpc_quotes_are_literal_and_bom_dropped(glue):
    examples = get_task(glue, "mrpc", double_unordered=False).get_examples("train")
    assert len(examples) == 3  # a quoting reader would merge lines 2 and 3
    assert examples[0].text_a == 'He said "the cat sat .'
    assert examples[1].text_b == '"The cat sat .'
    path = glue / "finetuning_data" / "mrpc" / "train.tsv"
    assert next(glue_data.iter_tsv_lines(str(path)))[1][0] == "Quality"


def test_mnli_dev_is_matched_and_both_are_evaluated(glue):
    task = get_task(glue, "mnli")
    assert [e.label for e in task.get_examples("dev")] == ["neutral"]
    assert task.get_eval_splits() == [("dev_matched", "mnli"), ("dev_mismatched", "mnli-mm")]
    assert task.get_test_splits() == ["test_matched", "test_mismatched", "diagnostic"]
    assert task.submission_name("test_mismatched") == "MNLI-mm"
    assert task.submission_name("diagnostic") == "AX"


@pytest.mark.parametrize("task_name", ["mrpc", "sts"])
def test_double_unordered_trains_on_both_orders(glue, task_name):
    single = get_task(glue, task_name, double_unordered=False).get_examples("train")
    double = get_task(glue, task_name, double_unordered=True).get_examples("train")
    n = len(single)
    assert len(double) == 2 * n
    assert [(e.text_b, e.text_a, e.label) for e in double[n:]] == \
        [(e.text_a, e.text_b, e.label) for e in single]
    assert len({e.eid for e in double}) == 2 * n
    # Only train is doubled.
    assert len(get_task(glue, task_name, double_unordered=True).get_examples("dev")) == 1


@pytest.mark.parametrize("task_name", ["sst", "qqp"])
def test_only_mrpc_and_sts_are_doubled(glue, task_name):
    # The official release doubles MRPC and STS-B only; QQP is order-free but trained as given.
    single = get_task(glue, task_name, double_unordered=False).get_examples("train")
    double = get_task(glue, task_name, double_unordered=True).get_examples("train")
    assert len(single) > 0
    assert [(e.text_a, e.text_b) for e in double] == [(e.text_a, e.text_b) for e in single]


def test_max_examples_limits_rows(glue):
    task = get_task(glue, "cola", max_train_examples=2, max_eval_examples=1)
    assert len(task.get_examples("train")) == 2
    assert len(task.get_examples("dev")) == 1
    assert len(task.get_examples("test")) == 2  # test sets are never cut


def test_glue_download_directory_names_work(tmp_path):
    write_fixtures(tmp_path, tasks={"sst", "sts"}, rename={"sst": "SST-2", "sts": "STS-B"})
    assert len(get_task(tmp_path, "sst").get_examples("train")) == 2
    assert len(get_task(tmp_path, "sts", double_unordered=False).get_examples("train")) == 2


# -- bad input ------------------------------------------------------------------------------------

def test_missing_task_directory_names_where_it_looked(tmp_path):
    task = get_task(tmp_path, "rte")
    with pytest.raises(task_lib.TaskDataError) as e:
        task.get_examples("train")
    message = str(e.value)
    assert os.path.join(str(tmp_path), "finetuning_data", "rte") in message
    assert os.path.join(str(tmp_path), "finetuning_data", "RTE") in message


def test_missing_file_names_the_expected_path(glue):
    os.remove(glue / "finetuning_data" / "mnli" / "dev_mismatched.tsv")
    task = get_task(glue, "mnli")
    with pytest.raises(task_lib.TaskDataError,
                       match=r"expected file .*mnli.dev_mismatched\.tsv"):
        task.get_examples("dev_mismatched")


def test_malformed_row_reports_file_and_line(glue):
    path = glue / "finetuning_data" / "rte" / "train.tsv"
    path.write_text("index\tsentence1\tsentence2\tlabel\n0\ta\tb\tentailment\n1\tonly two\n")
    task = get_task(glue, "rte")
    with pytest.raises(task_lib.TaskDataError, match=rf"{path}:3: expected at least 4"):
        task.get_examples("train")


def test_unknown_label_is_reported(glue):
    path = glue / "finetuning_data" / "sst" / "train.tsv"
    path.write_text("sentence\tlabel\ngood\t1\nbad\tnegative\n")
    task = get_task(glue, "sst")
    with pytest.raises(task_lib.TaskDataError,
                       match=rf"{path}:3: unknown label 'negative' for task sst"):
        task.get_examples("train")


def test_bad_regression_score_is_reported(glue):
    path = glue / "finetuning_data" / "sts" / "dev.tsv"
    text = FIXTURES["sts"]["dev.tsv"].replace("4.750", "7.5")
    path.write_text(text)
    with pytest.raises(task_lib.TaskDataError, match=rf"{path}:2: label 7.5 .* outside"):
        get_task(glue, "sts").get_examples("dev")


def test_unknown_task_lists_known_ones(tmp_path):
    config = make_config(tmp_path, ["sst"])
    config.task_names = ["sst2"]
    with pytest.raises(ValueError,
                       match=r"Unknown task 'sst2'; known tasks: .*cola, .*sst, sts"):
        task_builder.get_tasks(config)


# -- featurization --------------------------------------------------------------------------------

def test_pair_encoding_and_segment_ids(glue):
    config = make_config(glue, ["sst", "rte"], max_seq_length=12)
    rte = task_builder.get_tasks(config)[1]
    example = rte.get_examples("train")[0]  # "The cat sat ." / "A cat sat ."
    f = rte.featurize(example, is_training=True)
    ids = {t: i for i, t in enumerate(VOCAB)}
    expected = [ids[t] for t in ["[CLS]", "the", "cat", "sat", ".", "[SEP]", "a", "cat", "sat",
                                 ".", "[SEP]"]] + [0]
    assert f["input_ids"] == expected
    assert f["segment_ids"] == [0] * 6 + [1] * 5 + [0]
    assert f["input_mask"] == [1] * 11 + [0]
    assert f["task_id"] == 1  # position of rte in task_names
    assert f["rte_label_ids"] == 0 and f["rte_eid"] == 0


def test_pair_truncation_cuts_the_longer_side(glue):
    config = make_config(glue, ["qqp"], max_seq_length=9)
    qqp = task_builder.get_tasks(config)[0]
    example = qqp.get_examples("train")[0]  # 6 + 6 tokens -> 3 + 3 after truncation to 6
    f = qqp.featurize(example, is_training=True)
    ids = {t: i for i, t in enumerate(VOCAB)}
    assert f["input_ids"] == [ids[t] for t in ["[CLS]", "why", "is", "the", "[SEP]", "how", "is",
                                                 "the", "[SEP]"]]


def test_regression_targets_are_normalised(glue):
    sts = get_task(glue, "sts", double_unordered=False)
    features = [sts.featurize(e, True) for e in sts.get_examples("train")]
    assert [f["sts_targets"] for f in features] == pytest.approx([1.0, 0.1])


# -- feature cache and datasets -------------------------------------------------------------------

def _records(path):
    return list(tf.data.TFRecordDataset(path).as_numpy_iterator())


def test_dataset_is_padded_with_rows_of_no_task(glue):
    config = make_config(glue, ["cola", "sst"], train_batch_size=4)
    tasks = task_builder.get_tasks(config)
    pre = preprocessing.Preprocessor(config, tasks)
    data = pre.prepare_train()
    assert (data.n_real, data.n_examples) == (5, 8)
    rows = [r for batch in pre.train_dataset(data, seed=0, epoch=0)
            for r in preprocessing.decode_batch_outputs({k: v.numpy() for k, v in batch.items()})]
    assert len(rows) == 8
    task_ids = sorted(int(r["task_id"]) for r in rows)
    assert task_ids == [0, 0, 0, 1, 1, 2, 2, 2]
    for r in rows:
        assert r["input_ids"].dtype == np.int32
        if r["task_id"] == 2:
            assert not r["input_mask"].any()
        if r["task_id"] == 0:  # a cola row carries sst features at their zero default
            assert r["sst_label_ids"] == 0 and r["sst_eid"] == 0


def test_train_order_depends_on_seed_and_epoch_only(glue):
    config = make_config(glue, ["cola", "sst"], train_batch_size=1)
    tasks = task_builder.get_tasks(config)
    pre = preprocessing.Preprocessor(config, tasks)
    data = pre.prepare_train()

    def order(seed, epoch, skip=0):
        return [tuple(b["input_ids"].numpy()[0][:4])
                for b in pre.train_dataset(data, seed, epoch, skip_batches=skip)]

    assert order(0, 0) == order(0, 0)
    assert order(0, 0, skip=2) == order(0, 0)[2:]
    assert len({tuple(order(s, e)) for s in range(3) for e in range(3)}) > 1


def test_feature_cache_reuse_and_invalidation(glue, monkeypatch):
    config = make_config(glue, ["sst"])
    tasks = task_builder.get_tasks(config)
    pre = preprocessing.Preprocessor(config, tasks)
    first = pre.prepare_predict(tasks, "dev")

    calls = []
    original = type(tasks[0]).get_examples
    monkeypatch.setattr(type(tasks[0]), "get_examples",
                        lambda self, split: calls.append(split) or original(self, split))
    assert pre.prepare_predict(tasks, "dev").path == first.path
    assert calls == []  # served from the cache

    def path_with(**hparams):
        other = make_config(glue, ["sst"], **hparams)
        other_tasks = task_builder.get_tasks(other)
        return preprocessing.Preprocessor(other, other_tasks).prepare_predict(
            other_tasks, "dev").path

    # Another max_seq_length, vocabulary or casing gives another cache entry.
    assert path_with(max_seq_length=20) != first.path
    vocab = glue / "other_vocab.txt"
    vocab.write_text("\n".join(VOCAB + ["extra"]) + "\n")
    assert path_with(vocab_file=str(vocab), vocab_size=len(VOCAB) + 1) != first.path
    assert path_with(do_lower_case=False) != first.path
    assert len(calls) == 3
    # use_tfrecords_if_existing false always re-featurizes.
    assert path_with(use_tfrecords_if_existing=False) == first.path
    assert len(calls) == 4


def test_feature_cache_follows_the_data_content(glue):
    """An edited data file is featurized anew even with the same size and mtime; a split with
    no examples is refused before anything is cached, so fixing the file just works."""
    config = make_config(glue, ["sst"])
    train = glue / "finetuning_data" / "sst" / "train.tsv"

    def prepare():
        tasks = task_builder.get_tasks(config)
        return preprocessing.Preprocessor(config, tasks).prepare_train()

    first = prepare()
    stat = os.stat(train)
    text = train.read_text()
    flipped = text.replace("good \t1", "good \t0").replace("bad \t0", "bad \t1")
    assert flipped != text and len(flipped) == len(text)
    train.write_text(flipped)
    os.utime(train, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # same size, same mtime
    assert prepare().path != first.path

    cache_dir = config.preprocessed_data_dir
    cached = sorted(os.listdir(cache_dir))
    train.write_text("sentence\tlabel\n")
    with pytest.raises(task_lib.TaskDataError, match=r"task sst: no train examples in .*sst/train"
                                                     r"\.tsv"):
        prepare()
    assert sorted(os.listdir(cache_dir)) == cached  # nothing cached for the empty file
    train.write_text(text)
    assert prepare().path == first.path  # the fixed file is the first one again


def test_undeclared_feature_is_an_error(glue):
    config = make_config(glue, ["sst"])
    pre = preprocessing.Preprocessor(config, task_builder.get_tasks(config))
    with pytest.raises(ValueError, match=r"undeclared features \['sst_extra'\]"):
        pre.make_tf_example({"sst_extra": 1}, "here")


# -- test-set outputs -----------------------------------------------------------------------------

def test_glue_submission_files(glue, tmp_path):
    mnli = get_task(glue, "mnli")
    rows = [{"eid": np.int32(3), "predictions": np.int32(2)},
            {"eid": np.int32(0), "predictions": np.int32(0)}]
    [path] = mnli.write_test_predictions(rows, "test_matched", str(tmp_path / "out"))
    assert os.path.basename(path) == "MNLI-m.tsv"
    assert open(path).read() == "index\tprediction\n0\tcontradiction\n3\tneutral\n"

    sts = get_task(glue, "sts")
    rows = [{"eid": np.int32(0), "predictions": np.float32(0.5)},
            {"eid": np.int32(1), "predictions": np.float32(1.3)}]
    [path] = sts.write_test_predictions(rows, "test", str(tmp_path / "out"))
    assert os.path.basename(path) == "STS-B.tsv"
    assert open(path).read() == "index\tprediction\n0\t2.500\n1\t5.000\n"  # clipped to 0..5


def test_feature_values_are_stored_exactly_and_counted():
    """Features are written from Python numbers (faster than numpy's scalars): the same bytes as
    the numpy values give, float32 values exact; a wrong count is refused with the feature's name."""
    from finetune.feature_spec import FeatureSpec
    ints = np.array([[3, -7], [2 ** 40, 0]])
    floats = np.array([0.1, -1e-30, 3.4e38, 1 / 3], np.float32)
    feature = FeatureSpec("ids", [2, 2]).to_feature(ints)
    assert feature.SerializeToString() == tf.train.Feature(
        int64_list=tf.train.Int64List(value=ints.reshape(-1))).SerializeToString()
    feature = FeatureSpec("weights", [4], is_int_feature=False).to_feature(floats)
    assert feature.SerializeToString() == tf.train.Feature(
        float_list=tf.train.FloatList(value=floats)).SerializeToString()
    np.testing.assert_array_equal(np.array(feature.float_list.value, np.float32), floats)
    with pytest.raises(ValueError, match="feature 'ids' expects shape"):
        FeatureSpec("ids", [3]).to_feature([1, 2])
