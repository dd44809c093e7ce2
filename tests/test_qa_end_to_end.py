"""run_finetuning on slices of real SQuAD 1.1 and 2.0 with a tiny model: predictions, null odds,
eval JSON and results come out, agree with each other and with the official metric definitions.

SQuAD 2.0 has only (part of) its train set here: its "Spectre" article is the dev set, the
others train (the "Zelda" article first, so a small slice holds unanswerable questions).
"""
import json
import os

import pytest

import configure_finetuning
import run_finetuning
from finetune.qa import squad_official_eval
from finetune.qa import squad_official_eval_v1

TINY = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
        "intermediate_size": 64, "max_position_embeddings": 128}


def write_data(shared_data, root):
    """finetuning_data/{squadv1,squad}/{train,dev,test}.json (symlinks or small slices)."""
    v1_dir = root / "finetuning_data" / "squadv1"
    v1_dir.mkdir(parents=True)
    squad = shared_data / "squad"
    (v1_dir / "train.json").symlink_to(squad / "squadv1" / "train.json")
    (v1_dir / "dev.json").symlink_to(squad / "squadv1" / "dev.json")
    dev = json.loads((squad / "squadv1" / "dev.json").read_text(encoding="utf-8"))
    article = dict(dev["data"][0], paragraphs=dev["data"][0]["paragraphs"][:2])
    (v1_dir / "test.json").write_text(json.dumps({"version": "1.1", "data": [article]}))

    v2_dir = root / "finetuning_data" / "squad"
    v2_dir.mkdir(parents=True)
    articles = json.loads((squad / "squad" / "train.json").read_text(encoding="utf-8"))["data"]
    by_title = {a["title"]: a for a in articles}
    dev_article = by_title.pop("Spectre_(2015_film)")
    train = [by_title.pop("The_Legend_of_Zelda:_Twilight_Princess")] + list(by_title.values())
    (v2_dir / "train.json").write_text(json.dumps({"version": "v2.0", "data": train}))
    (v2_dir / "dev.json").write_text(json.dumps({"version": "v2.0", "data": [dev_article]}))
    test_article = dict(dev_article, paragraphs=dev_article["paragraphs"][:3])
    (v2_dir / "test.json").write_text(json.dumps({"version": "v2.0", "data": [test_article]}))
    return {qa["id"]: p["context"] for data in (dev["data"], [dev_article])
            for a in data for p in a["paragraphs"] for qa in p["qas"]}


def test_squad_v1_and_v2_end_to_end(shared_data, tmp_path):
    contexts = write_data(shared_data, tmp_path)
    hparams = dict(task_names=["squadv1", "squad"], model_hparam_overrides=TINY,
                   embedding_size=16, init_checkpoint="",
                   vocab_file=str(shared_data / "vocab" / "bert-uncased-vocab.txt"),
                   max_seq_length=128, max_query_length=32, doc_stride=64, beam_size=5,
                   n_best_size=5, max_train_examples=48, max_eval_examples=24,
                   train_batch_size=16, eval_batch_size=16, predict_batch_size=16,
                   num_train_epochs=1.0, learning_rate=1e-3, adam_bias_correction=True,
                   write_test_outputs=True,
                   n_writes_test=1)
    assert run_finetuning.main(["--data-dir", str(tmp_path), "--model-name", "tiny",
                                "--hparams", json.dumps(hparams)]) == 0
    config = configure_finetuning.FinetuningConfig.from_hparams("tiny", str(tmp_path), hparams)
    summary = json.loads(open(config.results_json).read())
    results = summary["trials"][0]["results"]

    def read(name):
        with open(os.path.join(config.qa_dir, name), encoding="utf-8") as f:
            return json.load(f)

    # SQuAD 1.1: 24 dev questions, every answer a piece of its context.
    predictions = read("squadv1_preds.json")
    assert len(predictions) == 24
    assert all(text in contexts[qid] for qid, text in predictions.items())
    dev = json.loads((tmp_path / "finetuning_data" / "squadv1" / "dev.json").read_text())
    gold = {qid: answers for qid, answers in squad_official_eval_v1.gold_from_dataset(
        dev["data"]).items() if qid in predictions}
    metrics = squad_official_eval_v1.evaluate(gold, predictions)
    assert read("squadv1_eval.json") == pytest.approx(metrics)
    assert results["squadv1"] == pytest.approx(metrics)
    assert 0.0 <= metrics["exact_match"] <= metrics["f1"] <= 100.0

    # SQuAD 2.0: predictions, null odds, thresholds.
    predictions, odds = read("squad_preds.json"), read("squad_null_odds.json")
    assert len(predictions) == len(odds) == 24
    assert all(text in contexts[qid] for qid, text in predictions.items())
    dev = json.loads((tmp_path / "finetuning_data" / "squad" / "dev.json").read_text())
    gold = {qid: answers for qid, answers in squad_official_eval.gold_from_dataset(
        dev["data"]).items() if qid in predictions}
    assert 0 < sum(not answers for answers in gold.values()) < 24
    metrics = squad_official_eval.evaluate(gold, predictions, odds, config.qa_na_threshold)
    assert read("squad_eval.json") == pytest.approx(metrics)
    assert results["squad"] == pytest.approx(metrics)
    assert {"HasAns_exact", "NoAns_f1", "best_f1", "best_f1_thresh"} <= set(metrics)
    assert metrics["best_f1"] >= metrics["f1"] - 1e-9  # the threshold search covers qa_na_threshold

    # Test outputs: SQuAD 2.0 answers are "" where the null odds exceed qa_na_threshold.
    test_dir = tmp_path / "models" / "tiny" / "test_predictions" / "trial_1"
    assert sorted(os.listdir(test_dir)) == ["squad_test_null_odds.json", "squad_test_preds.json",
                                            "squadv1_test_preds.json"]
    test_preds = json.loads((test_dir / "squad_test_preds.json").read_text())
    test_odds = json.loads((test_dir / "squad_test_null_odds.json").read_text())
    test_file = json.loads((tmp_path / "finetuning_data" / "squad" / "test.json").read_text())
    assert set(test_preds) == set(squad_official_eval.gold_from_dataset(test_file["data"]))
    assert all((text == "") == (test_odds[qid] > config.qa_na_threshold)
               for qid, text in test_preds.items())
    assert len(json.loads((test_dir / "squadv1_test_preds.json").read_text())) == sum(
        len(p["qas"]) for p in json.loads(
            (tmp_path / "finetuning_data" / "squadv1" / "test.json").read_text()
        )["data"][0]["paragraphs"])
