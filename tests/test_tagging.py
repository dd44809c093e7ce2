"""CoNLL-2000 chunking: reading, bad input, first-piece labels, windows, the head, end to end."""
import json
import logging
import os
import random

import numpy as np
import pytest
import tensorflow as tf

import configure_finetuning
import run_finetuning
from finetune import preprocessing
from finetune import task as task_lib
from finetune import task_builder
from finetune.tagging import tagging_metrics
from finetune.tagging import tagging_tasks
from model import layers
from model import modeling

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "on", "mat", ".",
         "un", "##believ", "##able", "##s", "dog", "ran"]
TRAIN = ("The DT B-NP\ncat NN I-NP\nsat VBD B-VP\non IN B-PP\nthe DT B-NP\nmat NN I-NP\n. . O\n\n"
         "-DOCSTART- -X- O\n\n"
         "Unbelievable JJ B-ADJP\ncats NNS B-NP\nran VBD B-VP\n. . O\n\n"
         "dog NN B-NP\nran VBD B-VP\n\n"
         "the DT B-NP\ndog NN I-NP\n")  # the last sentence has no blank line after it
TINY = {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2,
        "intermediate_size": 64, "max_position_embeddings": 64}


def make_config(root, files=None, **hparams):
    directory = root / "finetuning_data" / "chunk"
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in (files if files is not None else {"train.txt": TRAIN}).items():
        (directory / name).write_text(text, encoding="utf-8")
    (root / "vocab.txt").write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
    values = dict(task_names=["chunk"], vocab_size=len(VOCAB), max_seq_length=16,
                  init_checkpoint="", heldout_dev_sentences=1, model_hparam_overrides=TINY,
                  embedding_size=16)
    values.update(hparams)
    return configure_finetuning.FinetuningConfig.from_hparams("m", str(root), values)


def make_task(root, files=None, **hparams) -> tagging_tasks.Chunking:
    return task_builder.get_tasks(make_config(root, files, **hparams))[0]


# -- reading --------------------------------------------------------------------------------------

def test_registered_with_the_official_name_and_defaults(tmp_path):
    task = make_task(tmp_path)
    assert isinstance(task, tagging_tasks.Chunking) and task.name == "chunk"
    assert configure_finetuning.FinetuningConfig.from_hparams(
        "m", "/d", {"task_names": ["chunk"]}).max_seq_length == 256
    assert len(task.label_list) == 45 and task.label_list == sorted(task.label_list)


def test_without_dev_file_the_end_of_train_is_held_out_and_logged(tmp_path, caplog):
    task = make_task(tmp_path, heldout_dev_sentences=2)
    with caplog.at_level(logging.WARNING):
        train = task.get_examples("train")
        dev = task.get_examples("dev")
    assert [e.words for e in train] == [["The", "cat", "sat", "on", "the", "mat", "."],
                                        ["Unbelievable", "cats", "ran", "."]]
    assert [e.words for e in dev] == [["dog", "ran"], ["the", "dog"]]
    assert [e.eid for e in dev] == [0, 1]
    assert dev[1].source.endswith("train.txt:19")
    message = " ".join(r.getMessage() for r in caplog.records)
    assert "no dev file" in message and "last 2 of 4 sentences of" in message
    assert "train.txt (4 words" in message
    assert train[0].labels == ["B-NP", "E-NP", "S-VP", "S-PP", "B-NP", "E-NP", "O"]
    assert train[0].tags[:2] == ["B-NP", "I-NP"]  # the file's tags are kept for scoring


def test_iob2_labels_train_on_half_the_classes_and_score_as_bioes_does(tmp_path):
    """tagging_label_encoding IOB2: O/B-/I- labels (23 classes for CoNLL-2000's 11 types, against
    BIOES's 45), another feature cache, and the same chunks scored from a perfect prediction."""
    files = {"train.txt": TRAIN, "dev.txt": "a DT B-NP\ncat NN I-NP\nsat VBD B-VP\n"}
    bioes = make_task(tmp_path / "bioes", files)
    iob2 = make_task(tmp_path / "iob2", files, tagging_label_encoding="IOB2")
    assert len(iob2.label_list) == 23 and iob2.label_list == sorted(iob2.label_list)
    assert not any(label[:2] in ("E-", "S-") for label in iob2.label_list)
    sentence = iob2.get_examples("train")[0]
    assert sentence.labels == ["B-NP", "I-NP", "B-VP", "B-PP", "B-NP", "I-NP", "O"]
    assert sentence.tags == bioes.get_examples("train")[0].tags
    assert iob2.cache_key()["encoding"] == "IOB2" != bioes.cache_key()["encoding"]
    for task in (bioes, iob2):
        scorer = task.get_scorer("dev")
        [features] = task.featurize(task.get_examples("dev")[0], is_training=False)
        scorer.update({"eid": 0, "first_word": 0, "predictions": np.array(features["chunk_labels"]),
                       "labels_mask": np.array(features["chunk_labels_mask"]), "loss": 0.0})
        assert dict(scorer.get_results())["f1"] == 100.0
        assert scorer.conll_text().split("\n")[:3] == ["a B-NP B-NP", "cat I-NP I-NP",
                                                       "sat B-VP B-VP"]
    with pytest.raises(ValueError, match="tagging_label_encoding"):
        make_config(tmp_path / "bad", tagging_label_encoding="BIO")


def test_dev_file_is_used_when_present(tmp_path):
    task = make_task(tmp_path, {"train.txt": TRAIN, "dev.txt": "a DT B-NP\ncat NN I-NP\n"})
    assert len(task.get_examples("train")) == 4
    assert [e.words for e in task.get_examples("dev")] == [["a", "cat"]]
    assert task.cache_key()["heldout_dev_sentences"] == 0


def test_heldout_size_errors(tmp_path):
    with pytest.raises(task_lib.TaskDataError, match="leaves none of the 4"):
        make_task(tmp_path / "a", heldout_dev_sentences=4).get_examples("train")
    with pytest.raises(task_lib.TaskDataError, match="no dev file and heldout_dev_sentences"):
        make_task(tmp_path / "b", heldout_dev_sentences=0).get_examples("dev")


@pytest.mark.parametrize("bad_line, found", [("sat VBD\n", 2), ("sat VBD B-VP extra\n", 4)])
def test_wrong_number_of_columns_names_file_and_line(tmp_path, bad_line, found):
    text = "The DT B-NP\ncat NN I-NP\n" + bad_line + "\nok NN B-NP\n"
    task = make_task(tmp_path, {"train.txt": text})
    path = os.path.join(task.data_dir(), "train.txt")
    with pytest.raises(task_lib.TaskDataError,
                       match=rf"{path}:3: expected 3 space-separated columns .* found {found}"):
        task.get_examples("train")


def test_unknown_chunk_tag_names_file_and_line(tmp_path):
    task = make_task(tmp_path, {"train.txt": "The DT B-NP\n\ncat NN I-NP\nsat VBD X-VP\n"})
    with pytest.raises(task_lib.TaskDataError,
                       match=r"train.txt:4: tag 'X-VP' of word 'sat'"):
        task.get_examples("train")
    task = make_task(tmp_path / "b", {"train.txt": "a DT B-NP\n-DOCSTART- -X- O\nb NN Q\n"})
    with pytest.raises(task_lib.TaskDataError, match=r"train.txt:3: tag 'Q' of word 'b'"):
        task.get_examples("train")



# -- tag schemes: read off the file, converted to IOB2, or refused naming file and line ----------

# IOB1 (CoNLL-2003's original files): a chunk begins with I-; B- only right after a chunk of the
# same type. The same chunks as TRAIN's first sentence, then two adjacent NPs.
IOB1 = ("The DT I-NP\ncat NN I-NP\nsat VBD I-VP\non IN I-PP\nthe DT I-NP\nmat NN I-NP\n. . O\n\n"
        "the DT I-NP\ncat NN I-NP\nthe DT B-NP\ndog NN I-NP\nran VBD I-VP\n")
IOB1_AS_IOB2 = [["B-NP", "I-NP", "B-VP", "B-PP", "B-NP", "I-NP", "O"],
                ["B-NP", "I-NP", "B-NP", "I-NP", "B-VP"]]


def perfect_scores(task, split: str) -> dict:
    """The task's scores when every word is predicted as its training label."""
    scorer = task.get_scorer(split)
    for e in task.get_examples(split):
        scorer.update({"eid": e.eid, "first_word": 0, "loss": 0.0,
                       "predictions": [task.label_list.index(label) for label in e.labels],
                       "labels_mask": [1] * len(e.labels)})
    return dict(scorer.get_results())


def test_iob1_files_are_read_as_iob2_and_score_as_conlleval(tmp_path, caplog):
    """IOB1 gold tags were compared as strings with IOB2 predictions: a perfect tagger scored
    token accuracy below 100 without a word."""
    caplog.set_level(logging.INFO)
    task = make_task(tmp_path, {"train.txt": IOB1, "dev.txt": IOB1})
    assert [e.tags for e in task.get_examples("train")] == IOB1_AS_IOB2
    assert task.get_examples("train")[1].labels == ["B-NP", "E-NP", "B-NP", "E-NP", "S-VP"]
    scores = perfect_scores(task, "dev")
    assert scores["accuracy"] == scores["f1"] == 100.0
    assert "train.txt holds IOB1 tags: read as IOB2" in caplog.text


def test_each_file_is_read_in_its_own_scheme(tmp_path):
    """An IOB2 training file and a BIOES dev file mark the same chunks."""
    bioes = ("The DT B-NP\ncat NN E-NP\nsat VBD S-VP\non IN S-PP\nthe DT B-NP\nmat NN E-NP\n"
             ". . O\n")
    task = make_task(tmp_path, {"train.txt": TRAIN, "dev.txt": bioes})
    assert task.get_examples("dev")[0].tags == IOB1_AS_IOB2[0]
    assert perfect_scores(task, "dev")["accuracy"] == 100.0


@pytest.mark.parametrize("text, message", [
    # I- beginning a chunk (IOB1) and B- after O (IOB2) in one file: which chunks are meant?
    ("the DT B-NP\ncat NN I-NP\n\nsat VBD I-VP\n",
     r"train.txt:4: tag 'I-VP' begins a chunk at the start of a sentence \(IOB1\), but "
     r".*train.txt:1: tag 'B-NP' at the start of a sentence begins one with B- \(IOB2\)"),
    ("the DT B-NP\ncat NN E-NP\nsat VBD I-VP\n",
     r"train.txt:3: tag 'I-VP' after 'E-NP' is out of place in BIOES tags .* expected O, B- or S-"),
    ("the DT B-NP\ncat NN I-VP\nsat VBD S-VP\n",
     r"train.txt:2: tag 'I-VP' after 'B-NP' is out of place in BIOES tags .* "
     r"expected I-NP or E-NP"),
    ("the DT S-NP\ncat NN B-NP\n",
     r"train.txt:2: tag 'B-NP' ends its sentence inside a chunk: BIOES chunks end with E-NP"),
])
def test_a_tag_its_scheme_does_not_allow_is_refused_naming_file_and_line(tmp_path, text,
                                                                        message):
    task = make_task(tmp_path, {"train.txt": text})
    with pytest.raises(task_lib.TaskDataError, match=message):
        task.get_examples("train")


def custom_tagging(root, train: str, **spec):
    (root / "train.txt").write_text(train, encoding="utf-8")
    (root / "vocab.txt").write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
    config = configure_finetuning.FinetuningConfig.from_hparams("m", str(root), dict(
        task_names=["ner"], custom_tasks={"ner": dict(type="tagging", train=str(
            root / "train.txt"), **spec)}, vocab_size=len(VOCAB), init_checkpoint="",
        model_hparam_overrides=TINY, embedding_size=16, max_seq_length=16))
    return task_builder.get_tasks(config)[0]


def test_one_malformed_tag_among_chunk_tags_is_an_error_not_token_tagging(tmp_path):
    """Without "encoding", one tag not of a chunk's form made the whole task per-token tagging
    (scored by accuracy, no chunks) with only an INFO line."""
    with pytest.raises(task_lib.TaskDataError,
                       match=r"train.txt:3: tag 'B_PER' of word 'sat' is not O or B-, I-, E-, "
                             r"S-<type>, while the file holds chunk tags \(.*train.txt:1: "
                             r"'B-PER'\).*\"encoding\": \"token\""):
        custom_tagging(tmp_path, "the B-PER\ncat I-PER\nsat B_PER\n")
    assert custom_tagging(tmp_path, "the DT\ncat NN\nsat VBD\n").span_tags is False
    assert custom_tagging(tmp_path, "the B-PER\ncat I-PER\nsat O\n").span_tags is True
    assert custom_tagging(tmp_path, "the B-PER\ncat I-PER\nsat B_PER\n",
                          encoding="token").span_tags is False

# -- featurizing ----------------------------------------------------------------------------------

def test_labels_sit_on_the_first_piece_of_each_word(tmp_path):
    task = make_task(tmp_path)
    example = task.get_examples("train")[1]  # "Unbelievable cats ran ."
    [features] = task.featurize(example, is_training=True, log_example=True)
    ids = features["input_ids"]
    tokens = [VOCAB[i] for i in ids[:sum(features["input_mask"])]]
    assert tokens == ["[CLS]", "un", "##believ", "##able", "cat", "##s", "ran", ".", "[SEP]"]
    positions = features["chunk_labeled_positions"]
    assert positions[:4] == [1, 4, 6, 7]  # "un", "cat", "ran", "."; ##pieces get no label
    label_names = [task.label_list[i] for i in features["chunk_labels"][:4]]
    assert label_names == ["S-ADJP", "S-NP", "S-VP", "O"]
    assert features["chunk_labels_mask"] == [1.0] * 4 + [0.0] * 12
    assert positions[4:] == [0] * 12 and features["chunk_first_word"] == 0
    # As the official featurizer: segment id 1 on every real token.
    assert features["segment_ids"] == [1] * 9 + [0] * 7
    assert len(ids) == 16 and ids[9:] == [0] * 7


def check_windows(piece_counts, budget):
    windows = tagging_tasks.plan_windows(piece_counts, budget)
    owners = [w for word in range(len(piece_counts)) for w in windows if word in w.owned]
    assert len(owners) == len(piece_counts)  # every word owned exactly once
    for w in windows:
        assert sum(piece_counts[w.start:w.end]) <= budget
        assert all(w.start <= word < w.end for word in w.owned)
    return windows


def test_plan_windows():
    assert check_windows([1, 2, 1], 10) == [tagging_tasks.Window(0, 3, frozenset({0, 1, 2}))]
    windows = check_windows([1] * 10, 4)
    assert [(w.start, w.end) for w in windows] == [(0, 4), (2, 6), (4, 8), (6, 10)]
    assert [sorted(w.owned) for w in windows] == [[0, 1, 2], [3, 4], [5, 6], [7, 8, 9]]
    check_windows([4, 1, 4, 4, 1, 1], 4)  # words as long as the budget
    rng = random.Random(0)
    for _ in range(200):
        budget = rng.randint(1, 12)
        check_windows([rng.randint(1, budget) for _ in range(rng.randint(0, 30))], budget)
    with pytest.raises(ValueError, match="1..4 pieces"):
        tagging_tasks.plan_windows([5], 4)


def test_long_sentence_is_split_and_merged_back_without_losing_words(tmp_path):
    words = ["the", "cat", "sat", "on", "the", "mat", "unbelievable", "dogs", "ran"] * 3
    tags = ["B-NP", "I-NP", "B-VP", "B-PP", "B-NP", "I-NP", "B-ADJP", "B-NP", "B-VP"] * 3
    text = "".join(f"{w} X {t}\n" for w, t in zip(words, tags)) + "\nthe X B-NP\n"
    task = make_task(tmp_path, {"train.txt": text, "dev.txt": "a X O\n"}, max_seq_length=12)
    example = task.get_examples("train")[0]
    windows = task.featurize(example, is_training=False)
    assert len(windows) > 3
    scorer = task.get_scorer("train")
    owned = 0
    for f in windows:  # a perfect model: predicts each slot's label
        owned += int(sum(f["chunk_labels_mask"]))
        assert sum(f["input_mask"]) <= 12 and f["input_ids"][0] == 2
        scorer.update({"eid": f["chunk_eid"], "first_word": f["chunk_first_word"],
                       "predictions": np.array(f["chunk_labels"]), "loss": 0.0,
                       "labels_mask": np.array(f["chunk_labels_mask"])})
    assert owned == len(words)
    [second] = task.featurize(task.get_examples("train")[1], is_training=False)
    scorer.update({"eid": 1, "first_word": 0, "predictions": np.array(second["chunk_labels"]),
                   "labels_mask": np.array(second["chunk_labels_mask"]), "loss": 0.0})
    results = dict(scorer.get_results())
    assert results["f1"] == 100.0 and results["accuracy"] == 100.0
    lines = scorer.conll_text().split("\n")
    assert lines[:2] == ["the B-NP B-NP", "cat I-NP I-NP"] and len(lines) == len(words) + 4


def test_a_word_longer_than_a_window_keeps_its_first_pieces(tmp_path):
    task = make_task(tmp_path, {"train.txt": "unbelievables X B-NP\ncat X B-NP\n"},
                     max_seq_length=5, heldout_dev_sentences=0)
    windows = task.featurize(task.get_examples("train")[0], is_training=False)
    assert [VOCAB[i] for i in windows[0]["input_ids"]] == ["[CLS]", "un", "##believ",
                                                           "##able", "[SEP]"]
    assert [w["chunk_first_word"] for w in windows] == [0, 1]


# -- head -----------------------------------------------------------------------------------------

def test_head_names_and_masked_loss(tmp_path):
    config = make_config(tmp_path)
    task = task_builder.get_tasks(config)[0]
    bert_config = config.bert_config()
    head = task.create_head(bert_config, seed=3)
    assert sorted(v.name.split(":")[0] for v in head.variables) == [
        "task_specific/chunk/dense/bias", "task_specific/chunk/dense/kernel"]
    assert head.dense.kernel.shape == (32, 45)
    encoder = modeling.BertModel(bert_config, scope="electra", seed=0)
    features_list = [task.featurize(e, False)[0] for e in task.get_examples("train")]
    batch = {k: tf.constant(np.stack([f[k] for f in features_list]),
                            tf.float32 if k == "chunk_labels_mask" else tf.int32)
             for k in features_list[0]}
    out = encoder(batch["input_ids"], batch["input_mask"], batch["segment_ids"], training=False)
    losses, outputs = head(out, batch, training=True, percent_done=0.0,
                           seeds=layers.SeedStream(tf.constant([1, 2], tf.int64)))
    # By hand: softmax cross-entropy at each word's first piece, summed over masked words.
    sequence = out.sequence_output.numpy()
    kernel, bias = head.dense.kernel.numpy(), head.dense.bias.numpy()
    for row in range(len(features_list)):
        positions = batch["chunk_labeled_positions"][row].numpy()
        logits = sequence[row, positions] @ kernel + bias
        log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
        labels = batch["chunk_labels"][row].numpy()
        mask = batch["chunk_labels_mask"][row].numpy()
        expected = -(log_probs[np.arange(len(labels)), labels] * mask).sum()
        assert losses[row].numpy() == pytest.approx(expected, rel=1e-5)
    assert outputs["predictions"].shape == (3, 16)
    # No dropout in the tagging head: training and inference agree on the same encoder output.
    again, _ = head(out, batch, training=False, seeds=None, percent_done=0.0)
    np.testing.assert_allclose(losses.numpy(), again.numpy(), rtol=1e-6)


def test_featurized_records_round_trip(tmp_path):
    config = make_config(tmp_path, max_seq_length=8, train_batch_size=4)
    task = task_builder.get_tasks(config)[0]
    preprocessor = preprocessing.Preprocessor(config, [task])
    data = preprocessor.prepare_train()
    n_windows = sum(len(task.featurize(e, True)) for e in task.get_examples("train"))
    assert data.n_real == n_windows > 3
    batch = next(iter(preprocessor.train_dataset(data, seed=0, epoch=0)))
    assert batch["chunk_labels_mask"].dtype == tf.float32
    assert batch["chunk_labeled_positions"].shape == (4, 8)


# -- end to end -----------------------------------------------------------------------------------

def test_end_to_end_on_a_slice_of_the_shared_training_file(shared_data, tmp_path):
    """A tiny random-init model on 300 sentences of CoNLL-2000 train; dev = 60 held-out ones."""
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    (data_dir / "vocab.txt").write_bytes(
        (shared_data / "vocab" / "bert-uncased-vocab.txt").read_bytes())
    hparams = dict(task_names=["chunk"], raw_data_dir=str(shared_data / "{task}"),
                   init_checkpoint="", model_hparam_overrides=TINY, embedding_size=16,
                   max_seq_length=32, max_train_examples=300, heldout_dev_sentences=60,
                   train_batch_size=16, eval_batch_size=32, num_train_epochs=2.0,
                   learning_rate=3e-3, layerwise_lr_decay=0.0, adam_bias_correction=True)
    assert run_finetuning.main(["--data-dir", str(data_dir), "--model-name", "tiny",
                                "--hparams", json.dumps(hparams)]) == 0
    results_dir = data_dir / "models" / "tiny" / "results"
    summary = json.loads((results_dir / "chunk_results.json").read_text())
    metrics = summary["median"]["chunk"]
    assert {"f1", "precision", "recall", "accuracy", "loss", "NP/f1"} <= set(metrics)
    assert 0.0 <= metrics["f1"] <= 100.0 and metrics["accuracy"] > 30.0  # learned something
    assert "chunk: " in (results_dir / "chunk_results.txt").read_text()

    # Predictions of all 60 held-out sentences (the end of train.txt), word by word.
    lines = (results_dir / "chunk_dev_trial1_predictions.txt").read_text().split("\n")
    with open(shared_data / "chunk" / "train.txt", encoding="utf-8") as f:
        sentences = f.read().strip().split("\n\n")[-60:]
    gold = [line.split() for s in sentences for line in s.split("\n")]
    rows = [line.split() for line in lines if line]
    assert len(rows) == len(gold) and lines.count("") == 61
    assert [(r[0], r[1]) for r in rows] == [(g[0], g[2]) for g in gold]
    assert {r[2] for r in rows} <= {"O"} | {f"{p}-{t}" for p in "BI"
                                            for t in tagging_tasks.CONLL2000_CHUNK_TYPES}
    # The report is conlleval's reading of that file, and agrees with the results.
    counts = tagging_metrics.conlleval(
        ([r[1] for r in block], [r[2] for r in block])
        for block in [[line.split() for line in s.split("\n")]
                      for s in "\n".join(lines).strip().split("\n\n")])
    assert counts.overall()[2] == pytest.approx(metrics["f1"])
    assert (results_dir / "chunk_dev_trial1_conlleval.txt").read_text() == counts.report()


def test_run_writes_dev_and_test_predictions_in_conll_format(tmp_path):
    test_text = "the DT B-NP\ncat NN I-NP\nsat VBD B-VP\n\ndog NN B-NP\n"
    config = make_config(tmp_path, {"train.txt": TRAIN, "dev.txt": TRAIN, "test.txt": test_text},
                         train_batch_size=2, eval_batch_size=2, predict_batch_size=2,
                         num_train_epochs=1.0, write_test_outputs=True)
    summary = run_finetuning.run_finetuning(config)
    assert 0.0 <= summary["median"]["chunk"]["f1"] <= 100.0
    results_dir = os.path.dirname(config.results_txt)
    dev = open(os.path.join(results_dir, "chunk_dev_trial1_predictions.txt")).read()
    assert [line.split()[:2] for line in dev.split("\n\n")[1].split("\n")] == [
        ["Unbelievable", "B-ADJP"], ["cats", "B-NP"], ["ran", "B-VP"], [".", "O"]]
    test_dir = os.path.join(config.test_predictions_dir, "trial_1")
    assert sorted(os.listdir(test_dir)) == ["chunk_test_conlleval.txt",
                                            "chunk_test_predictions.txt"]
    rows = open(os.path.join(test_dir, "chunk_test_predictions.txt")).read().split("\n")
    assert [r.split()[:2] for r in rows if r] == [["the", "B-NP"], ["cat", "I-NP"],
                                                  ["sat", "B-VP"], ["dog", "B-NP"]]
    assert rows[3] == "" and all(len(r.split()) == 3 for r in rows if r)
