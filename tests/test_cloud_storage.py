"""Cloud storage: every command with its files on ram://, TensorFlow's in-memory filesystem,
which goes through tf.io.gfile as gs://, s3:// and hdfs:// do; and util/fs's helpers there.

ram:// lives inside one process, so the flow runs the commands' main() functions in-process,
from an empty working directory that must stay empty (a command that took a URL for a local
path would create a `ram:` directory there). The builder's worker processes are tested with a
file:// URL instead (tests/test_build_pretraining_dataset.py), which Python's os cannot open.
"""
import gzip
import json
import logging
import os
import uuid

import pytest

from tests.test_docs import load_tool
from util import checkpoint, fs, io_utils
from util import training_utils as tu

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def bucket():
    """A fresh ram:// directory (the filesystem is shared by the whole test process)."""
    root = f"ram://t{uuid.uuid4().hex[:8]}"
    yield root
    fs.rmtree(root)


def _write(path: str, text: str | bytes) -> None:
    with fs.open(path, "wb") as f:
        f.write(text.encode("utf-8") if isinstance(text, str) else text)


# -- util/fs on ram:// ---------------------------------------------------------------------------


def test_files_and_directories_on_ram(bucket):
    _write(f"{bucket}/d/ck.index", b"x" * 10)
    _write(f"{bucket}/d/sub/a.txt", "a")
    assert fs.isdir(f"{bucket}/d") and fs.isdir(f"{bucket}/d/sub")
    # ram:// itself calls any prefix of a file name a directory; fs answers as a bucket would.
    assert not fs.isdir(f"{bucket}/d/ck") and not fs.exists(f"{bucket}/d/ck")
    assert not fs.exists(f"{bucket}/d/c") and not fs.isfile(f"{bucket}/d/sub")
    assert fs.isfile(f"{bucket}/d/ck.index") and fs.getsize(f"{bucket}/d/ck.index") == 10
    assert sorted(fs.listdir(f"{bucket}/d")) == ["ck.index", "sub"]
    assert fs.glob(f"{bucket}/d/*.index") == [f"{bucket}/d/ck.index"]
    assert [(r, sorted(d), f) for r, d, f in fs.walk(f"{bucket}/d")] == [
        (f"{bucket}/d", ["sub"], ["ck.index"]), (f"{bucket}/d/sub", [], ["a.txt"])]
    assert fs.relpath(f"{bucket}/d/sub/a.txt", f"{bucket}/d") == "sub/a.txt"
    assert fs.abspath(f"{bucket}/d") == f"{bucket}/d" and fs.realpath(bucket) == bucket
    fs.replace(f"{bucket}/d/sub/a.txt", f"{bucket}/d/b.txt")
    assert not fs.exists(f"{bucket}/d/sub/a.txt") and fs.read_bytes(f"{bucket}/d/b.txt") == b"a"
    fs.remove(f"{bucket}/d/b.txt")
    with pytest.raises(FileNotFoundError):
        fs.remove(f"{bucket}/d/b.txt")
    with pytest.raises(FileNotFoundError):
        fs.open(f"{bucket}/missing.txt")
    fs.rmtree(f"{bucket}/d")
    assert not fs.exists(f"{bucket}/d/ck.index")


def test_text_binary_and_gzip_streams_on_ram(bucket):
    path = f"{bucket}/t.tsv"
    with fs.open(path, "w", encoding="utf-8") as f:
        f.write("\ufeffa\tb\r\nc\td\n")
    with fs.open(path, encoding="utf-8-sig", newline="") as f:  # as the GLUE reader opens
        assert f.readlines() == ["a\tb\r\n", "c\td\n"]
    with fs.open(path, encoding="utf-8-sig") as f:
        assert f.read() == "a\tb\nc\td\n"
    with fs.open(path, "rb") as f:  # seekable, as the builder's range reader needs
        f.seek(3)
        assert f.read(3) == b"a\tb" and f.tell() == 6
    _write(f"{bucket}/t.jsonl.gz", gzip.compress("é\n".encode("utf-8")))
    with fs.open_maybe_gzip(f"{bucket}/t.jsonl.gz") as f:
        assert f.read() == "é\n"
    assert fs.same_content(path, path) and not fs.same_content(path, f"{bucket}/t.jsonl.gz")


def test_atomic_writes_on_ram_leave_no_temporaries(bucket):
    path = f"{bucket}/out/results.json"
    io_utils.write_json(path, {"a": 1})
    with pytest.raises(RuntimeError):
        with io_utils.atomic_open(path) as f:
            f.write('{"half": ')
            raise RuntimeError("killed mid-write")
    assert io_utils.read_json(path) == {"a": 1}  # the old content, whole
    assert fs.listdir(f"{bucket}/out") == ["results.json"]
    io_utils.copy_file(path, f"{bucket}/copy/r.json")
    assert io_utils.read_json(f"{bucket}/copy/r.json") == {"a": 1}


def test_checkpoints_and_pruning_on_ram(bucket):
    import numpy as np

    manager = checkpoint.CheckpointManager(f"{bucket}/model", max_to_keep=2)
    for step in (1, 2, 3):
        manager.save({"w": np.full([2], step, np.float32), "global_step": np.int64(step)}, step)
    assert sorted(n for n in fs.listdir(f"{bucket}/model") if n.endswith(".index")) == [
        "model.ckpt-2.index", "model.ckpt-3.index"]
    # A newer save cut before its index (the commit point) is ignored, then cleaned up.
    _write(f"{bucket}/model/model.ckpt-4.data-00000-of-00001", b"torn")
    assert manager.latest() == f"{bucket}/model/model.ckpt-3"
    assert checkpoint.read_all(f"{bucket}/model")["w"].tolist() == [3.0, 3.0]
    assert checkpoint.resolve(f"{bucket}/model/model.ckpt-2") == f"{bucket}/model/model.ckpt-2"


def test_run_lock_is_a_lease_on_ram(bucket, caplog):
    lock = tu.RunLock(bucket).acquire()
    owner = json.loads(fs.read_bytes(lock.path))
    assert owner["pid"] == os.getpid() and owner["token"]
    lock.release()
    assert not fs.exists(lock.path)

    # Another host's lease, refreshed a moment ago: refused; not refreshed for an hour: taken.
    lease = {"pid": 7, "host": "elsewhere", "started": 0, "token": "x"}
    io_utils.write_json(lock.path, dict(lease, refreshed=__import__("time").time()))
    with pytest.raises(tu.RunLockError, match="pid 7 on host elsewhere"):
        tu.RunLock(bucket).acquire()
    io_utils.write_json(lock.path, dict(lease, refreshed=0))
    with caplog.at_level(logging.WARNING):
        lock = tu.RunLock(bucket).acquire()
    assert "taking over stale lock" in caplog.text

    # The holder refreshes its lease, and stops when another run has taken it over.
    lock._refreshed = 0.0
    lock.heartbeat()
    refreshed = json.loads(fs.read_bytes(lock.path))
    assert refreshed["token"] == lock._token and refreshed["refreshed"] > 0
    io_utils.write_json(lock.path, dict(lease, refreshed=1e12))
    lock._refreshed = 0.0
    with pytest.raises(tu.RunLockError, match="taken over by pid 7"):
        lock.heartbeat()


# -- the commands end to end on ram:// -------------------------------------------------------------

WORDS = ("the cat sat on mat dog ran a movie is good bad where did sit what was it very "
         "big small red blue . ?").split()
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS
TINY = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
        "intermediate_size": 64, "max_position_embeddings": 32}


def _corpus(n: int, seed: int) -> str:
    import random
    rng = random.Random(seed)
    docs = []
    for _ in range(n):
        sentences = [" ".join(rng.choice(WORDS[:-2]) for _ in range(rng.randint(4, 9))) + " ."
                     for _ in range(rng.randint(2, 5))]
        docs.append("\n".join(sentences))
    return "\n\n".join(docs) + "\n"


def _conll(sentences: int) -> str:
    lines = []
    for i in range(sentences):
        lines += ["the DT B-NP", ["cat", "dog"][i % 2] + " NN I-NP", "sat VBD B-VP",
                  "on IN B-PP", "the DT B-NP", "mat NN I-NP", ". . O", ""]
    return "\n".join(lines)


def _squad(questions: int) -> str:
    context = "the cat sat on the mat . the dog ran ."
    qas = [{"id": f"q{i}", "question": ["where did the cat sit ?", "what ran ?"][i % 2],
            "answers": [{"text": ["on the mat", "the dog"][i % 2],
                         "answer_start": [12, 25][i % 2]}]} for i in range(questions)]
    return json.dumps({"version": "1.1", "data": [
        {"title": "t", "paragraphs": [{"context": context, "qas": qas}]}]})


def _write_inputs(root: str) -> None:
    _write(f"{root}/corpus/a.txt", _corpus(30, 0))
    _write(f"{root}/corpus/b.txt.gz", gzip.compress(_corpus(30, 1).encode()))
    _write(f"{root}/data/vocab.txt", "\n".join(VOCAB) + "\n")
    tasks = f"{root}/data/finetuning_data"
    sst = "sentence\tlabel\n" + "".join(f"the movie is {w} \t{int(w == 'good')}\n"
                                        for w in ["good", "bad"] * 6)
    _write(f"{tasks}/sst/train.tsv", sst)
    _write(f"{tasks}/sst/dev.tsv", sst)
    _write(f"{tasks}/sst/test.tsv", "index\tsentence\n0\ta bad movie .\n1\tgood movie\n")
    for split in ("train", "dev", "test"):
        _write(f"{tasks}/chunk/{split}.txt", _conll(6))
        _write(f"{tasks}/squadv1/{split}.json", _squad(6))
    stars = "".join(json.dumps({"text": f"a {w} movie", "stars": str(1 + (w == "good"))}) + "\n"
                    for w in ["good", "bad"] * 4)
    _write(f"{root}/stars/train.jsonl", stars)
    _write(f"{root}/stars/dev.jsonl", stars)
    _write(f"{root}/stars/test.jsonl", stars)
    _write(f"{root}/stars/spec.json", json.dumps({
        "type": "classification", "train": "train.jsonl", "dev": "dev.jsonl", "test": "test.jsonl",
        "text_a": "text", "label": "stars"}))
    _write(f"{root}/predict_in.txt", "the movie is good\nthe movie is bad\n")


def _local_entries() -> list[str]:
    """What exists in the working directory, and any `ram:` directory beside the code."""
    return sorted(os.listdir(".")) + [p for p in os.listdir(REPO) if p.startswith("ram:")]


def test_every_command_on_ram(tmp_path, monkeypatch, caplog, capsys):
    root = f"ram://flow{uuid.uuid4().hex[:8]}"
    data = f"{root}/data"
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    caplog.set_level(logging.INFO)
    _write_inputs(root)

    _build_on_ram(root, data)
    model = _pretrain_on_ram(root, data, caplog, capsys)
    trial = _finetune_on_ram(root, data)
    _predict_export_and_score_on_ram(root, model, trial, capsys)

    assert not [n for n in fs.listdir(root) if ".tmp" in n]  # exports moved into place whole
    # Nothing reached the local disk: the working directory is empty, no `ram:` directory.
    assert _local_entries() == []
    fs.rmtree(root)


def _build_on_ram(root: str, data: str) -> None:
    """A text and a gzip file read from ram://, shards and metadata written there."""
    import build_pretraining_dataset

    assert build_pretraining_dataset.main([
        "--corpus-dir", f"{root}/corpus", "--output-dir", f"{data}/pretrain_tfrecords",
        "--vocab-file", f"{data}/vocab.txt", "--max-seq-length", "16", "--num-out-files", "4",
        "--eval-fraction", "0.25", "--no-progress"]) == 0
    metadata = io_utils.read_json(f"{data}/pretrain_tfrecords/metadata.json")
    assert metadata["num_train_examples"] > 0 and metadata["eval_files"]


def _pretrain_on_ram(root: str, data: str, caplog, capsys) -> str:
    """Pre-training with eval and probes, resumed to more steps; probe and inspect_run on it."""
    import run_pretraining

    hparams = dict(vocab_size=len(VOCAB), embedding_size=16, max_seq_length=16,
                   model_hparam_overrides=TINY, generator_hidden_size=0.5, train_batch_size=4,
                   eval_batch_size=4, num_train_steps=2, save_checkpoints_steps=2,
                   iterations_per_loop=2, num_eval_steps=1, do_eval=True,
                   probe_tasks={"sst": f"{data}/finetuning_data/sst",
                                "chunk": f"{data}/finetuning_data/chunk/train.txt"},
                   probe_train_size=4)
    model = f"{data}/models/m"
    assert run_pretraining.main(["--data-dir", data, "--model-name", "m", "--hparams",
                                 json.dumps(hparams)]) == 0
    assert run_pretraining.main(["--data-dir", data, "--model-name", "m", "--hparams",
                                 json.dumps(dict(hparams, num_train_steps=4))]) == 0
    assert f"resumed from {model}/model.ckpt-2 at step 2" in caplog.text
    results = io_utils.read_json(f"{model}/results/unsup_results.json")
    assert results["global_step"] == 4 and "probe/sst/last" in results
    assert "probe/chunk/mean" in results
    assert checkpoint.latest_valid(model) == f"{model}/model.ckpt-4"
    assert "train/loss" in tu.read_scalars(model)
    assert fs.isfile(f"{model}/vocab.txt") and not fs.exists(f"{model}/.run.lock")
    assert load_tool("probe").main([
        "--model-dir", model, "--tasks", "chunk", "sst", "--conll",
        f"{data}/finetuning_data/chunk/train.txt", "--sst", f"{data}/finetuning_data/sst",
        "--train-size", "4", "--test-size", "2", "--updates", "2", "--no-random",
        "--max-seq-length", "16", "--json", f"{root}/probe.json"]) == 0
    assert "chunk/last" in io_utils.read_json(f"{root}/probe.json")["pretrained"]
    capsys.readouterr()
    assert load_tool("inspect_run").main([model]) == 0
    assert "held-out evals (2):" in capsys.readouterr().out
    return model


def _finetune_on_ram(root: str, data: str) -> str:
    """A GLUE task, chunking, SQuAD and a custom task, with test outputs; the first trial."""
    import configure_finetuning
    import run_finetuning

    ft = dict(task_names=["sst", "chunk", "squadv1", "stars"],
              custom_tasks={"stars": f"{root}/stars/spec.json"}, model_hparam_overrides=TINY,
              embedding_size=16, vocab_size=len(VOCAB), max_seq_length=32, max_query_length=8,
              doc_stride=8, train_batch_size=8, eval_batch_size=8, predict_batch_size=8,
              num_train_epochs=1.0, write_test_outputs=True, n_writes_test=1)
    assert run_finetuning.main(["--data-dir", data, "--model-name", "m", "--hparams",
                                json.dumps(ft)]) == 0
    config = configure_finetuning.FinetuningConfig.from_hparams("m", data, ft)
    trial = f"{config.model_dir}_1"
    summary = io_utils.read_json(config.results_json)
    assert set(summary["median"]) == {"sst", "chunk", "squadv1", "stars"}
    assert fs.isfile(f"{config.qa_dir}/squadv1_preds.json")
    assert fs.glob(f"{config.test_predictions_dir}/trial_1/*")
    assert fs.glob(f"{config.preprocessed_data_dir}/*.tfrecord")
    assert checkpoint.latest_valid(trial) is not None
    return trial


def _predict_export_and_score_on_ram(root: str, model: str, trial: str, capsys) -> None:
    """Predict, export (Hugging Face, SavedModel), import, score."""
    import export_model
    import predict
    import score_text
    import tensorflow as tf

    assert predict.main(["--model-dir", trial, "--task", "sst", "--input",
                         f"{root}/predict_in.txt", "--output", f"{root}/pred.jsonl",
                         "--no-progress"]) == 0
    with fs.open(f"{root}/pred.jsonl") as f:
        assert len(f.readlines()) == 2
    assert export_model.main(["--model-dir", model, "--format", "huggingface",
                              "--output", f"{root}/hf"]) == 0
    assert {"config.json", "model.safetensors", "vocab.txt"} <= set(fs.listdir(f"{root}/hf"))
    assert export_model.main(["--model-dir", trial, "--format", "saved_model",
                              "--output", f"{root}/saved"]) == 0
    served = tf.saved_model.load(f"{root}/saved").signatures["serving_default"]
    ids = tf.constant([[2, 5, 6, 3] + [0] * 28], tf.int32)  # the trial's max_seq_length, 32
    outputs = served(input_ids=ids, input_mask=tf.cast(ids > 0, tf.int32),
                     segment_ids=tf.zeros_like(ids))
    assert any(k.startswith("sst") for k in outputs), sorted(outputs)
    assert export_model.main(["--import-dir", f"{root}/hf", "--format", "huggingface",
                              "--output", f"{root}/imported"]) == 0
    assert checkpoint.read_all(f"{root}/imported")["electra/embeddings/word_embeddings"].shape \
        == (len(VOCAB), 16)
    capsys.readouterr()
    assert score_text.main(["--model-dir", f"{root}/imported", "--json", "the cat sat"]) == 0
    scored = json.loads(capsys.readouterr().out)
    assert scored["tokens"] == ["[CLS]", "the", "cat", "sat", "[SEP]"]
    assert len(scored["replaced_prob"]) == 5
