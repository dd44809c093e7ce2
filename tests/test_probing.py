"""Frozen-feature probes (model/probing.py, tools/probe.py) and probes during pre-training eval."""
import json
import os
import sys

import numpy as np
import pytest

import pretrain_fixtures as fx
import run_pretraining
from configure_pretraining import PretrainingConfig
from model import modeling, probing, tokenization
from pretrain import evaluation
from pretrain import trainer as pretrain_trainer
from util import checkpoint
from util.hparams import HParamError

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "tools"))
import probe  # noqa: E402

WORDS = [f"w{i}" for i in range(fx.NUM_WORDS)]


def test_probe_reaches_a_separable_labelling_and_chance_on_shuffled_labels():
    rs = np.random.RandomState(0)
    # Four classes, linearly separable by construction, in correlated features (a badly
    # conditioned problem, as real encoder features are).
    mixing = rs.randn(24, 24) * np.linspace(0.05, 3.0, 24)
    x = rs.randn(12000, 24) @ mixing
    scores = x @ rs.randn(24, 4)
    top2 = np.sort(scores, axis=1)[:, -2:]
    x, y = x[top2[:, 1] - top2[:, 0] > 1.0][:6000], np.argmax(scores, 1)[top2[:, 1] - top2[:, 0] > 1.0][:6000]
    assert len(y) == 6000  # separable with a margin
    accuracy = probing.fit_linear_probe(x[:4000], y[:4000], x[4000:], y[4000:], 4)
    assert accuracy > 0.98
    shuffled = rs.permutation(y[:4000])
    chance = probing.fit_linear_probe(x[:4000], shuffled, x[4000:], y[4000:], 4)
    majority = np.bincount(y[4000:]).max() / 2000
    assert chance < majority + 0.05
    # Deterministic: the same inputs give the same probe.
    assert probing.fit_linear_probe(x[:4000], y[:4000], x[4000:], y[4000:], 4) == accuracy


def write_conll(path, sentences: int = 60, seed: int = 0, words=WORDS) -> None:
    """Sentences of fixture words; POS = the word's parity class, chunk = B-/I- by position."""
    rs = np.random.RandomState(seed)
    with open(path, "w", encoding="utf-8") as f:
        for _ in range(sentences):
            for j, k in enumerate(rs.randint(len(words), size=rs.randint(3, 9))):
                f.write(f"{words[k]} {'EVEN' if k % 2 == 0 else 'ODD'} "
                        f"{'B-NP' if j % 3 == 0 else 'I-NP'}\n")
            f.write("\n")


def write_sst(directory, rows: int = 80, words=WORDS) -> None:
    """Label 1 when the sentence's first word is in the first half of the word list."""
    os.makedirs(directory, exist_ok=True)
    rs = np.random.RandomState(1)
    for split, n in (("train", rows), ("dev", rows // 2)):
        with open(os.path.join(directory, f"{split}.tsv"), "w", encoding="utf-8") as f:
            f.write("sentence\tlabel\n")
            for _ in range(n):
                ks = rs.randint(len(words), size=rs.randint(3, 8))
                f.write(" ".join(words[k] for k in ks) + f"\t{int(ks[0] < len(words) // 2)}\n")


def write_model_dir(path, vocab_path: str, vocab_size: int, seed: int) -> modeling.BertConfig:
    """A pre-training-layout model dir: bert_config.json, the vocabulary, one checkpoint."""
    os.makedirs(path, exist_ok=True)
    config = modeling.BertConfig(vocab_size=vocab_size, hidden_size=32, num_hidden_layers=2,
                                 num_attention_heads=2, intermediate_size=64,
                                 max_position_embeddings=32, embedding_size=16)
    with open(os.path.join(path, "bert_config.json"), "w") as f:
        f.write(config.to_json_string())
    with open(vocab_path, "rb") as src, \
            open(os.path.join(path, os.path.basename(vocab_path)), "wb") as dst:
        dst.write(src.read())
    encoder = modeling.BertModel(config, "electra", seed=seed)
    checkpoint.save_tensors(os.path.join(path, "model.ckpt-1"),
                            {checkpoint.checkpoint_name(v): v for v in encoder.variables})
    return config


def run_tool(tmp_path, model_dir, conll, sst, *extra) -> dict:
    out = tmp_path / "probes.json"
    assert probe.main(["--model-dir", str(model_dir), "--conll", str(conll), "--sst", str(sst),
                       "--train-size", "40", "--test-size", "20", "--max-seq-length", "32",
                       "--json", str(out), *extra]) == 0
    return json.loads(out.read_text())


def check_results(results: dict) -> None:
    keys = {f"{t}/{f}" for t in ("pos", "chunk", "sst") for f in ("last", "mean")}
    for column in ("pretrained", "random"):
        assert set(results[column]) == keys
        assert all(0.0 <= v <= 1.0 for v in results[column].values())


def test_probe_tool_on_a_tiny_wordpiece_model(tmp_path, instances_of):
    fx.write_vocab(str(tmp_path / "vocab.txt"))
    write_model_dir(tmp_path / "model", str(tmp_path / "vocab.txt"), fx.VOCAB_SIZE, seed=7)
    write_conll(tmp_path / "train.txt")
    write_sst(tmp_path / "sst")
    results = run_tool(tmp_path, tmp_path / "model", tmp_path / "train.txt", tmp_path / "sst",
                       "--random-seed", "7")
    check_results(results)
    # The restored encoder is the saved one: with the random encoder's seed equal to the saved
    # model's, both columns are the same numbers.
    assert results["pretrained"] == results["random"]
    # Word identity decides POS here (two classes): even a random encoder's first-piece
    # features hold some of it, well above the 50% of chance.
    assert results["pretrained"]["pos/last"] > 0.65
    other = run_tool(tmp_path, tmp_path / "model", tmp_path / "train.txt", tmp_path / "sst",
                     "--random-seed", "8")
    assert other["pretrained"] == results["pretrained"]
    assert other["random"] != results["random"]
    # Several random encoders: each listed (seeds 7 and 8 here), the table's column their mean.
    extractors = instances_of(probing.FeatureExtractor)
    both = run_tool(tmp_path, tmp_path / "model", tmp_path / "train.txt", tmp_path / "sst",
                    "--random-seed", "7", "--random-seeds", "2")
    assert both["random_seeds"] == [results["random"], other["random"]]
    # The three encoders are probed through one traced forward pass: the random ones are the
    # pre-trained encoder with fresh weights assigned, which probe as encoders built fresh.
    assert len(extractors) == 1 and extractors[0]._forward.experimental_get_tracing_count() == 1
    for key, value in both["random"].items():
        assert value == pytest.approx((results["random"][key] + other["random"][key]) / 2)


def test_probe_tool_on_a_tiny_sentencepiece_model(tmp_path):
    words = ["river", "mountain", "castle", "garden", "window", "yellow", "quickly", "silver",
             "market", "thunder", "pencil", "orange", "village", "harbor", "blanket", "candle"]
    rs = np.random.RandomState(3)
    text = [" ".join(words[k] for k in rs.randint(len(words), size=8)) for _ in range(300)]
    spm = tokenization.train_sentencepiece(text, str(tmp_path / "spm"), 40, do_lower_case=True)
    tokenizer = tokenization.build_tokenizer(vocab_file=spm, do_lower_case=True)
    assert len(tokenizer.encode("thunder")) >= 1
    write_model_dir(tmp_path / "model", spm, 40, seed=3)
    write_conll(tmp_path / "train.txt", words=words)
    write_sst(tmp_path / "sst", words=words)
    results = run_tool(tmp_path, tmp_path / "model", tmp_path / "train.txt", tmp_path / "sst")
    check_results(results)
    assert results["pretrained"]["pos/last"] > 0.65


def test_word_features_are_taken_at_each_words_first_piece(tmp_path):
    fx.write_vocab(str(tmp_path / "vocab.txt"))
    tokenizer = tokenization.build_tokenizer(vocab_file=str(tmp_path / "vocab.txt"))
    config = modeling.BertConfig(vocab_size=fx.VOCAB_SIZE, hidden_size=16, num_hidden_layers=2,
                                 num_attention_heads=2, intermediate_size=32,
                                 max_position_embeddings=8, embedding_size=16)
    extractor = probing.FeatureExtractor(modeling.BertModel(config, "electra", seed=1), tokenizer)
    sentence = ["w1", "w2", "w3"]
    last, mean, kept = extractor.word_features([sentence, ["w4"] * 9])
    out = extractor.encoder(np.array([[fx.CLS, 6, 7, 8, fx.SEP]], np.int32),
                            np.ones([1, 5], np.int32), np.zeros([1, 5], np.int32), training=False)
    np.testing.assert_allclose(last[:3], out.sequence_output.numpy()[0, 1:4], atol=1e-5)
    layers = np.mean([x.numpy()[0, 1:4] for x in out.all_layer_outputs], axis=0)
    np.testing.assert_allclose(mean[:3], layers, atol=1e-5)
    # The second sentence has 9 words but 8 positions: [CLS] + 6 words + [SEP] fit.
    assert kept.tolist() == [True] * 3 + [True] * 6 + [False] * 3


def test_bad_probe_data_is_refused_with_file_and_line(tmp_path, caplog):
    bad = tmp_path / "bad.txt"
    bad.write_text("w1 A B-NP\nw2 A\n\n")
    with pytest.raises(probing.ProbeDataError, match=r"bad.txt:2: 2 columns"):
        probing.load_task("chunk", str(bad))
    sst = tmp_path / "sst"
    sst.mkdir()
    (sst / "train.tsv").write_text("text\tlabel\nw1\t0\n")
    (sst / "dev.tsv").write_text("sentence\tlabel\nw1\t0\n")
    with pytest.raises(probing.ProbeDataError, match=r"train.tsv:1: the header"):
        probing.load_task("sst", str(sst))
    fx.write_vocab(str(tmp_path / "vocab.txt"))
    write_model_dir(tmp_path / "model", str(tmp_path / "vocab.txt"), fx.VOCAB_SIZE, seed=0)
    assert probe.main(["--model-dir", str(tmp_path / "model"), "--conll", str(bad),
                       "--tasks", "chunk"]) == 2
    assert "bad.txt:2: 2 columns" in caplog.text


def test_probe_tasks_hparam_is_checked_before_work_starts(tmp_path):
    hparams = fx.tiny_hparams(probe_tasks={"ner": str(tmp_path)})
    with pytest.raises(HParamError, match=r"probe_tasks.*'ner' is not a probe"):
        PretrainingConfig.from_hparams("m", str(tmp_path), hparams)
    hparams = fx.tiny_hparams(probe_tasks={"sst": str(tmp_path / "missing")})
    with pytest.raises(HParamError, match=r"probe_tasks.*'sst' must name an existing SST-2"):
        PretrainingConfig.from_hparams("m", str(tmp_path), hparams)


def test_pretraining_eval_reports_probes(tmp_path, instances_of):
    trainers = instances_of(pretrain_trainer.Trainer)
    fits = probing._fit.experimental_get_tracing_count()
    data = fx.write_data(str(tmp_path / "data"))
    write_conll(tmp_path / "train.txt")
    write_sst(tmp_path / "sst")
    hparams = fx.tiny_hparams(num_train_steps=4, save_checkpoints_steps=2, eval_every_steps=2,
                              do_eval=True, probe_train_size=40,
                              probe_tasks={"pos": str(tmp_path / "train.txt"),
                                           "sst": str(tmp_path / "sst")})
    config = PretrainingConfig.from_hparams("probed", data, hparams)
    metrics = run_pretraining.train_or_eval(config)
    assert {"probe/pos/last", "probe/pos/mean", "probe/sst/last", "probe/sst/mean"} <= set(metrics)
    assert metrics["probe/pos/last"] > 0.5  # word identity decides the tag
    history = json.loads((tmp_path / "data" / "models" / "probed" / "results" /
                          evaluation.HISTORY_FILE).read_text())
    assert [h["global_step"] for h in history] == [2, 4]
    assert all("probe/sst/mean" in h for h in history)
    # Traced once for the run, not per eval: the eval step, the probes' forward pass (over
    # batches of several lengths) and their fit (8 fits of 2 feature kinds, 2 tasks, 2 evals).
    assert len(trainers) == 1
    assert trainers[0]._eval_step_fn.experimental_get_tracing_count() == 1
    extractor = evaluation._extractor(trainers[0].model.discriminator_encoder, config.vocab_file,
                                      config.do_lower_case, config.max_seq_length)
    assert extractor._forward.experimental_get_tracing_count() == 1
    assert probing._fit.experimental_get_tracing_count() - fits <= 1
    saved = json.loads(open(config.results_json).read())
    assert saved["probe/pos/mean"] == metrics["probe/pos/mean"]


def test_probes_on_the_shared_conll_and_sst_files(shared_data, tmp_path):
    fx.write_vocab(str(tmp_path / "vocab.txt"))
    # The shared words are unknown to the fixture vocabulary ([UNK]): this checks the readers
    # and the tool on the real layouts, not accuracy.
    write_model_dir(tmp_path / "model", str(tmp_path / "vocab.txt"), fx.VOCAB_SIZE, seed=0)
    results = run_tool(tmp_path, tmp_path / "model", shared_data / "chunk" / "train.txt",
                       shared_data / "glue" / "SST-2")
    check_results(results)
    task = probing.load_task("pos", str(shared_data / "chunk" / "train.txt"), 40, 20)
    assert len(task.train_texts) == 40 and len(task.test_texts) == 20
    assert task.train_texts[0][:3] == ["Confidence", "in", "the"]
    assert task.train_labels[0][:3] == ["NN", "IN", "DT"]
