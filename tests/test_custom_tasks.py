"""Tasks defined by data (hparam custom_tasks) and predict.py, against the built-in tasks.

A custom task over a built-in task's files must be that task under another name: the same
features, the same trained weights (bit for bit) and the same dev results; predict.py must give
the predictions the trial's evaluation wrote.
"""
import json
import os

import numpy as np
import pytest

import configure_finetuning
import predict
import run_finetuning
from finetune import task_builder
from finetune import trainer
from finetune.classification import table_data
from util import checkpoint
from util import task_spec
from util.hparams import HParamError

TINY = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
        "intermediate_size": 64, "max_position_embeddings": 128}


def config_for(root, shared, tasks, **hparams):
    values = dict(task_names=list(tasks), vocab_file=str(shared / "vocab" / "bert-uncased-vocab.txt"),
                  init_checkpoint="", model_hparam_overrides=TINY, embedding_size=16,
                  max_seq_length=32, train_batch_size=8, eval_batch_size=8, num_train_epochs=1.0,
                  learning_rate=1e-3, adam_bias_correction=True)
    values.update(hparams)
    return configure_finetuning.FinetuningConfig.from_hparams("m", str(root), values)


def renamed(mapping: dict, old: str, new: str) -> dict:
    return {k.replace(old, new): v for k, v in mapping.items()}


def assert_same_trial(builtin, custom, name, custom_name):
    """Same results and bit-identical final tensors (head scope renamed)."""
    a = checkpoint.read_all(trainer.trial_dir(builtin, 1))
    b = renamed(checkpoint.read_all(trainer.trial_dir(custom, 1)), custom_name, name)
    assert sorted(a) == sorted(b)
    different = [k for k in a if not np.array_equal(a[k], b[k])]
    assert not different, different[:5]


def featurized(task, split, limit=None):
    examples = task.get_examples(split)[:limit]
    rows = []
    for e in examples:
        f = task.featurize(e, is_training=split == "train")
        rows += f if isinstance(f, list) else [f]
    return rows


def trial_dir(config) -> str:
    return trainer.trial_dir(config, 1)


def eval_predictions(config, task_name, split="dev") -> list[dict]:
    path = os.path.join(os.path.dirname(config.results_txt),
                        f"{task_name}_{split}_trial1_predictions.jsonl")
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def assert_same_predictions(got: list[dict], want: list[dict]) -> None:
    """Equal records; numbers equal up to float32 rounding: the model's XLA-fused blocks
    (model/layers.py) may round the last digit differently in predict.py's graph and in the
    evaluation's (probabilities differed by 1e-6)."""
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert _same(a, b), (a, b)


def _same(a, b) -> bool:
    if isinstance(b, dict):
        return isinstance(a, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in b)
    if isinstance(b, list):
        return isinstance(a, list) and len(a) == len(b) and all(map(_same, a, b))
    if isinstance(b, float):
        return a == pytest.approx(b, abs=1e-5)
    return a == b


def run_predict(tmp_path, config, input_path, *extra) -> list[dict]:
    output = tmp_path / "predictions.jsonl"
    assert predict.main(["--model-dir", trial_dir(config), "--input", str(input_path),
                         "--output", str(output), "--no-progress", *extra]) == 0
    with open(output, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


# -- classification: a custom task over SST-2 is `sst` -----------------------------------------


def test_custom_classification_over_sst2_is_the_builtin_sst(shared_data, tmp_path):
    glue = shared_data / "glue"
    limits = dict(max_train_examples=64, max_eval_examples=40)
    builtin = config_for(tmp_path / "a", shared_data, ["sst"],
                         raw_data_dir=str(glue / "{task}"), **limits)
    spec = {"type": "classification", "train": str(glue / "SST-2" / "train.tsv"),
            "dev": str(glue / "SST-2" / "dev.tsv"), "text_a": "sentence", "label": "label"}
    custom = config_for(tmp_path / "b", shared_data, ["reviews"],
                        custom_tasks={"reviews": spec}, **limits)
    sst, reviews = task_builder.get_tasks(builtin)[0], task_builder.get_tasks(custom)[0]
    assert reviews.label_list == sst.label_list == ["0", "1"]
    assert custom.custom_tasks["reviews"]["labels"] == ["0", "1"]  # stored with the model
    for split in ("train", "dev"):
        a, b = featurized(sst, split), featurized(reviews, split)
        assert len(a) == len(b) > 30 and a == [renamed(r, "reviews", "sst") for r in b]

    results_a = run_finetuning.run_finetuning(builtin)["median"]["sst"]
    results_b = run_finetuning.run_finetuning(custom)["median"]["reviews"]
    assert results_a == results_b
    assert_same_trial(builtin, custom, "sst", "reviews")

    # predict.py on the dev file's first 40 rows (a TSV with the spec's field names, and the
    # same sentences as plain lines) equals what the evaluation wrote.
    written = eval_predictions(custom, "reviews")
    assert len(written) == 40 and set(written[0]) == {"label", "probabilities"}
    rows = (glue / "SST-2" / "dev.tsv").read_text(encoding="utf-8").splitlines()[:41]
    (tmp_path / "dev.tsv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    (tmp_path / "dev.txt").write_text("\n".join(r.split("\t")[0] for r in rows[1:]) + "\n",
                                      encoding="utf-8")
    assert_same_predictions(run_predict(tmp_path, custom, tmp_path / "dev.tsv"), written)
    assert_same_predictions(run_predict(tmp_path, custom, tmp_path / "dev.txt"), written)
    accuracy = np.mean([p["label"] == r.split("\t")[1] for p, r in zip(written, rows[1:])])
    assert accuracy * 100 == pytest.approx(results_b["accuracy"])


# -- tagging: the chunk column is `chunk`, the POS column a POS tagger --------------------------


def test_custom_tagging_with_the_chunk_column_is_the_builtin_chunk(shared_data, tmp_path):
    limits = dict(max_train_examples=48, max_eval_examples=24, heldout_dev_sentences=24,
                  max_seq_length=64)
    builtin = config_for(tmp_path / "a", shared_data, ["chunk"],
                         raw_data_dir=str(shared_data / "{task}"), **limits)
    spec = {"type": "tagging", "train": str(shared_data / "chunk" / "train.txt"), "tag_column": 2}
    custom = config_for(tmp_path / "b", shared_data, ["phrases"],
                        custom_tasks={"phrases": spec}, **limits)
    chunk, phrases = task_builder.get_tasks(builtin)[0], task_builder.get_tasks(custom)[0]
    assert phrases.span_tags and phrases.label_list == chunk.label_list  # 11 types, BIOES
    for split in ("train", "dev"):
        assert featurized(chunk, split) == [renamed(r, "phrases", "chunk")
                                            for r in featurized(phrases, split)]
    results_a = run_finetuning.run_finetuning(builtin)["median"]["chunk"]
    results_b = run_finetuning.run_finetuning(custom)["median"]["phrases"]
    assert results_a == results_b and "f1" in results_b
    assert_same_trial(builtin, custom, "chunk", "phrases")

    written = eval_predictions(custom, "phrases")
    dev = phrases.get_examples("dev")
    assert [p["words"] for p in written] == [e.words for e in dev]
    (tmp_path / "dev.txt").write_text("\n".join(" ".join(e.words) for e in dev) + "\n",
                                      encoding="utf-8")
    assert_same_predictions(run_predict(tmp_path, custom, tmp_path / "dev.txt"), written)


def test_custom_tagging_with_the_pos_column_learns_pos_tags(shared_data, tmp_path):
    spec = {"type": "tagging", "train": str(shared_data / "chunk" / "train.txt"), "tag_column": 1}
    config = config_for(tmp_path, shared_data, ["pos"], custom_tasks={"pos": spec},
                        max_train_examples=400, max_eval_examples=100, heldout_dev_sentences=100,
                        max_seq_length=64, num_train_epochs=4.0, train_batch_size=16,
                        learning_rate=3e-3)
    task = task_builder.get_tasks(config)[0]
    assert not task.span_tags and {"NN", "VBZ", "DT", "IN"} <= set(task.label_list)
    results = run_finetuning.run_finetuning(config)["median"]["pos"]
    assert set(results) == {"accuracy", "loss"}  # per-token tags: no chunk F1
    dev = task.get_examples("dev")
    tags = [t for e in dev for t in e.tags]
    majority = max(tags.count(t) for t in set(tags)) / len(tags) * 100
    # A random-init tiny encoder after 100 steps, far above always answering "NN" (14.1%).
    assert results["accuracy"] > max(60.0, majority + 40), (results, majority)  # measured 71.7
    written = eval_predictions(config, "pos")
    correct = sum(p == g for w, e in zip(written, dev) for p, g in zip(w["tags"], e.tags))
    assert correct / len(tags) * 100 == pytest.approx(results["accuracy"])


# -- QA: a custom task over the SQuAD 1.1 files is `squadv1` ------------------------------------


def test_custom_qa_over_squad_files_is_the_builtin_squadv1(shared_data, tmp_path):
    squad = shared_data / "squad" / "squadv1"
    limits = dict(max_train_examples=24, max_eval_examples=12, max_seq_length=96,
                  max_query_length=24, doc_stride=48, num_train_epochs=1.0)
    builtin = config_for(tmp_path / "a", shared_data, ["squadv1"],
                         raw_data_dir=str(shared_data / "squad" / "{task}"), **limits)
    spec = {"type": "qa", "train": str(squad / "train.json"), "dev": str(squad / "dev.json")}
    custom = config_for(tmp_path / "b", shared_data, ["myqa"], custom_tasks={"myqa": spec},
                        **limits)
    assert custom.max_seq_length == 96  # the user's value beats the QA default of 512
    squadv1, myqa = task_builder.get_tasks(builtin)[0], task_builder.get_tasks(custom)[0]
    assert not myqa.v2 and not myqa.is_mrqa
    assert featurized(squadv1, "dev") == [renamed(r, "myqa", "squadv1")
                                          for r in featurized(myqa, "dev")]
    results_a = run_finetuning.run_finetuning(builtin)["median"]["squadv1"]
    results_b = run_finetuning.run_finetuning(custom)["median"]["myqa"]
    assert results_a == results_b and {"exact_match", "f1"} <= set(results_b)
    assert_same_trial(builtin, custom, "squadv1", "myqa")

    written = eval_predictions(custom, "myqa")
    dev = myqa.get_examples("dev")
    assert [p["id"] for p in written] == [e.qas_id for e in dev]
    contexts = {}
    data = json.loads((squad / "dev.json").read_text(encoding="utf-8"))["data"]
    for article in data:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                contexts[qa["id"]] = (paragraph["context"], qa["question"])
    with open(tmp_path / "questions.jsonl", "w", encoding="utf-8") as f:
        for e in dev:
            context, question = contexts[e.qas_id]
            f.write(json.dumps({"id": e.qas_id, "context": context, "question": question}) + "\n")
    assert_same_predictions(run_predict(tmp_path, custom, tmp_path / "questions.jsonl"), written)


# -- regression and the spec ---------------------------------------------------------------------


def test_custom_regression_over_sts_is_the_builtin_sts(shared_data, tmp_path):
    glue = shared_data / "glue"
    limits = dict(max_train_examples=32, max_eval_examples=16, num_train_epochs=1.0,
                  double_unordered=False)
    builtin = config_for(tmp_path / "a", shared_data, ["sts"], raw_data_dir=str(glue / "{task}"),
                         **limits)
    spec = {"type": "regression", "train": str(glue / "STS-B" / "train.tsv"),
            "dev": str(glue / "STS-B" / "dev.tsv"), "text_a": "sentence1", "text_b": "sentence2",
            "label": "score", "range": [0, 5]}
    custom = config_for(tmp_path / "b", shared_data, ["similar"], custom_tasks={"similar": spec},
                        **limits)
    sts, similar = task_builder.get_tasks(builtin)[0], task_builder.get_tasks(custom)[0]
    assert featurized(sts, "dev") == [renamed(r, "similar", "sts")
                                      for r in featurized(similar, "dev")]
    assert (run_finetuning.run_finetuning(builtin)["median"]["sts"]
            == run_finetuning.run_finetuning(custom)["median"]["similar"])
    written = eval_predictions(custom, "similar")
    assert len(written) == 16 and all(set(p) == {"score"} for p in written)


def test_labels_are_read_from_training_and_stored_with_the_trial(tmp_path):
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "good", "bad",
                                "ok"]) + "\n")
    train = tmp_path / "train.jsonl"
    rows = [("good", 2), ("bad", 10), ("ok", 2), ("good", 10), ("bad", 1)]
    train.write_text("".join(json.dumps({"t": t, "y": y}) + "\n" for t, y in rows))
    spec = {"type": "classification", "train": "train.jsonl", "dev": "train.jsonl",
            "text_a": "t", "label": "y", "metrics": ["accuracy", "f1", "mcc"]}
    os.chdir(tmp_path)  # relative paths are relative to the working directory
    values = dict(task_names=["stars"], custom_tasks={"stars": spec}, vocab_file=str(vocab),
                  vocab_size=8, init_checkpoint="", max_seq_length=8, train_batch_size=2,
                  eval_batch_size=2, model_hparam_overrides=TINY, embedding_size=8)
    config = configure_finetuning.FinetuningConfig.from_hparams("m", str(tmp_path), values)
    assert config.custom_tasks["stars"]["train"] == str(train)
    task = task_builder.get_tasks(config)[0]
    assert task.label_list == ["1", "2", "10"]  # integers in numeric order
    results = run_finetuning.run_finetuning(config)["median"]["stars"]
    assert list(results) == ["accuracy", "macro_f1", "mcc", "loss"]
    stored = json.loads((tmp_path / "models" / "m" / "finetuning_models" / "stars_model_1" /
                         "finetune_config.json").read_text())
    assert stored["training_settings"]["custom_tasks"]["stars"]["labels"] == ["1", "2", "10"]
    # Predicting needs neither the training file nor the vocabulary's original place.
    os.remove(train)
    os.remove(vocab)
    (tmp_path / "new.txt").write_text("good\nbad ok\n")
    predictions = run_predict(tmp_path, config, tmp_path / "new.txt")
    assert len(predictions) == 2 and set(predictions[0]["probabilities"]) == {"1", "2", "10"}
    assert sum(predictions[0]["probabilities"].values()) == pytest.approx(1.0, abs=1e-5)


@pytest.mark.parametrize("spec, message", [
    ({"type": "sentiment"}, r"custom_tasks\.t\.type: must be one of"),
    ({"type": "classification", "train": "a.csv"}, r"custom_tasks\.t\.text_a: missing"),
    ({"type": "classification", "train": "a.xls", "text_a": "x", "label": "y"},
     r"custom_tasks\.t\.train: cannot tell the format of .*a\.xls"),
    ({"type": "classification", "train": "a.csv", "text_a": "x", "label": "y",
      "metrics": ["auc"]}, r"custom_tasks\.t\.metrics: must be from \['accuracy', 'f1', 'mcc'\]"),
    ({"type": "classification", "train": "a.csv", "header": False, "text_a": "x", "label": 1},
     r"custom_tasks\.t\.text_a: expected a 0-based column number"),
    ({"type": "regression", "train": "a.csv", "text_a": "x", "label": "y", "range": [5, 1]},
     r"custom_tasks\.t\.range: expected \[lo, hi\]"),
    ({"type": "tagging", "train": "a.txt", "encoding": "BIO"},
     r"custom_tasks\.t\.encoding: must be one of \['span', 'token'\]"),
    ({"type": "qa", "train": "a.json", "version": 3}, r"custom_tasks\.t\.version: must be 1 or 2"),
    ({"type": "qa"}, r"custom_tasks\.t: names no data file"),
    ("missing_spec.json", r"custom_tasks\.t: spec file .*missing_spec\.json does not exist"),
])
def test_bad_specs_name_the_key(spec, message):
    with pytest.raises(HParamError, match=message):
        task_spec.parse({"t": spec})


def test_spec_file_paths_are_relative_to_the_spec(tmp_path):
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "ner.json").write_text(json.dumps(
        {"type": "tagging", "train": "../data/train.conll"}))
    spec = task_spec.parse({"ner": str(tmp_path / "specs" / "ner.json")})["ner"]
    assert spec.files == {"train": str(tmp_path / "specs" / ".." / "data" / "train.conll")}
    with pytest.raises(HParamError, match="lower-case identifier"):
        task_spec.parse({"My-Task": {"type": "qa", "train": "x.json"}})


def test_table_reader_formats(tmp_path):
    (tmp_path / "a.csv").write_text('id,text,label\n1,"hello, ""world""\nagain",pos\n2,bye,neg\n')
    records = table_data.read_records(str(tmp_path / "a.csv"), "csv",
                                      {"text_a": "text", "label": "label"})
    assert [r.values for r in records] == [{"text_a": 'hello, "world"\nagain', "label": "pos"},
                                           {"text_a": "bye", "label": "neg"}]
    assert [r.line for r in records] == [2, 4]  # a quoted newline: the next row starts later
    (tmp_path / "b.tsv").write_text('say "hi\tpos\nbye\tneg\n')  # no header, literal quotes
    records = table_data.read_records(str(tmp_path / "b.tsv"), "tsv",
                                      {"text_a": 0, "label": -1}, header=False)
    assert [r.values["text_a"] for r in records] == ['say "hi', "bye"]
    (tmp_path / "c.jsonl").write_text('{"x": "a", "y": 3}\n\n{"x": "b", "y": true}\n')
    records = table_data.read_records(str(tmp_path / "c.jsonl"), "jsonl",
                                      {"text_a": "x", "label": "y"})
    assert [(r.values["label"], r.source.rsplit(":", 1)[1]) for r in records] == [
        ("3", "1"), ("true", "3")]


def test_a_multitask_run_mixes_custom_and_builtin_tasks(shared_data, tmp_path):
    """CoLA's header-less TSV as a custom task (column numbers) beside the built-in sst."""
    glue = shared_data / "glue"
    cola = {"type": "classification", "train": str(glue / "CoLA" / "train.tsv"),
            "dev": str(glue / "CoLA" / "dev.tsv"), "header": False, "text_a": 3, "label": 1,
            "metrics": ["mcc", "accuracy"]}
    config = config_for(tmp_path, shared_data, ["sst", "acceptable"],
                        custom_tasks={"acceptable": cola}, raw_data_dir=str(glue / "{task}"),
                        max_train_examples=32, max_eval_examples=16)
    builtin_cola = config_for(tmp_path / "c", shared_data, ["cola"],
                              raw_data_dir=str(glue / "{task}"), max_eval_examples=16)
    acceptable = task_builder.get_tasks(config)[1]
    assert acceptable.task_id() == 1
    assert [(e.text_a, e.label) for e in acceptable.get_examples("dev")] == [
        (e.text_a, e.label) for e in task_builder.get_tasks(builtin_cola)[0].get_examples("dev")]
    results = run_finetuning.run_finetuning(config)["median"]
    assert set(results) == {"sst", "acceptable"}
    assert list(results["acceptable"]) == ["mcc", "accuracy", "loss"]
    heads = {n.split("/")[1] for n in checkpoint.read_all(trial_dir(config)) if
             n.startswith("task_specific/")}
    assert heads == {"sst", "acceptable"}
