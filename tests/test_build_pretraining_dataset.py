"""End-to-end tests of build_pretraining_dataset.py on fixture corpora (and a slice of the real one)."""
import gzip
import io
import json
import lzma
import os
import pathlib
import re
import tarfile
import time

import pytest

import build_pretraining_dataset
from model import tokenization
from pretrain import pretrain_data
from pretrain.builder import dataset_builder
from util import io_utils, workers

WORDS = [f"w{i}" for i in range(300)]
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", ",", "cafe", "\u535a"] + WORDS
PAD, UNK, CLS, SEP = 0, 1, 2, 3


@pytest.fixture
def vocab_file(tmp_path) -> str:
    path = tmp_path / "vocab.txt"
    path.write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
    return str(path)


def make_corpus(directory: pathlib.Path, num_files: int = 3, docs_per_file: int = 6,
                seed: int = 0) -> list[str]:
    """Text files of documents (blank lines between them) made of vocab words; returns all lines."""
    import random
    rng = random.Random(seed)
    directory.mkdir(parents=True, exist_ok=True)
    all_lines = []
    for f in range(num_files):
        lines = []
        for _ in range(docs_per_file):
            for _ in range(rng.randint(1, 8)):
                lines.append(" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 12))) + ".")
            lines.append("")
        (directory / f"part_{f}.txt").write_text("\n".join(lines), encoding="utf-8")
        all_lines += lines
    return all_lines


def make_long_lines(directory: pathlib.Path, name: str = "long.txt", seed: int = 1) -> list[str]:
    """A file of documents whose lines hold several sentences ("W7 w3 w9. W1 w2."), many of them
    longer than 32 tokens and a few single sentences longer still; returns its lines."""
    import random
    rng = random.Random(seed)
    lines = []
    for _ in range(12):
        for _ in range(rng.randint(1, 5)):
            sentences = []
            for _ in range(rng.randint(1, 8)):
                n = rng.randint(0, 12) if rng.random() < 0.9 else rng.randint(30, 70)
                sentences.append(" ".join([rng.choice(WORDS).upper()]
                                          + [rng.choice(WORDS) for _ in range(n)]) + ".")
            lines.append(" ".join(sentences))
        lines.append("")
    directory.mkdir(parents=True, exist_ok=True)
    (directory / name).write_text("\n".join(lines), encoding="utf-8")
    return lines


def build(corpus_dir, output_dir, vocab_file, **kwargs) -> dict:
    messages = kwargs.pop("messages", [])
    settings = dict(max_seq_length=32, num_out_files=1, eval_fraction=0.0, show_progress=False)
    settings.update(kwargs)
    cfg = dataset_builder.BuildConfig(corpus_dir=str(corpus_dir), output_dir=str(output_dir),
                                      vocab_file=vocab_file, log=messages.append, **settings)
    return dataset_builder.build_dataset(cfg)


def read_records(paths, max_seq_length):
    import tensorflow as tf

    dataset = tf.data.TFRecordDataset([str(p) for p in paths]).map(
        lambda r: pretrain_data.parse_pretrain_example(r, max_seq_length))
    return [{k: v.numpy().tolist() for k, v in ex.items()} for ex in dataset]


def all_shards(output_dir, metadata):
    return [pathlib.Path(output_dir) / name for name in metadata["shards"]]


def check_layout(record, max_seq_length):
    """[CLS] A [SEP] (B [SEP]) [PAD]...: mask, segments and separators all consistent."""
    ids, mask, seg = record["input_ids"], record["input_mask"], record["segment_ids"]
    n = sum(mask)
    assert len(ids) == len(mask) == len(seg) == max_seq_length
    assert mask == [1] * n + [0] * (max_seq_length - n)
    assert ids[n:] == [PAD] * (max_seq_length - n) and seg[n:] == [0] * (max_seq_length - n)
    assert ids[0] == CLS and ids[n - 1] == SEP
    num_a = seg[:n].count(0)
    assert seg[:n] == [0] * num_a + [1] * (n - num_a)
    assert ids[num_a - 1] == SEP
    assert ids[1:n].count(SEP) == (1 if num_a == n else 2)
    assert CLS not in ids[1:] and PAD not in ids[:n]
    return n


def test_layout_and_token_counts(tmp_path, vocab_file):
    lines = make_corpus(tmp_path / "corpus", num_files=3, docs_per_file=30)
    metadata = build(tmp_path / "corpus", tmp_path / "out", vocab_file)
    records = read_records(all_shards(tmp_path / "out", metadata), 32)
    assert len(records) == metadata["num_examples"] > 50
    real_tokens = [check_layout(r, 32) for r in records]
    assert sum(real_tokens) == metadata["num_example_tokens"]
    tokenizer = tokenization.FullTokenizer(vocab_file)
    assert metadata["num_tokens"] == sum(len(tokenizer.encode(line)) for line in lines)
    assert 0 < sum(r["segment_ids"].count(1) > 0 for r in records) < len(records)
    # Tokens that survive truncation are the corpus's, in order within each example.
    assert all(UNK not in r["input_ids"] for r in records)
    assert metadata["shards"]["pretrain_data.tfrecord-0-of-1"] == {
        "examples": len(records), "tokens": metadata["num_tokens"],
        "tokens_kept": metadata["num_tokens"], "tokens_cut": 0,
        "example_tokens": sum(real_tokens), "single_segment": metadata["num_single_segment"],
        "split": "train"}


def test_default_keeps_every_token_of_long_lines(tmp_path, vocab_file):
    lines = make_long_lines(tmp_path / "corpus")
    tokenizer = tokenization.FullTokenizer(vocab_file)
    line_ids = [tokenizer.encode(line) for line in lines]
    assert sum(len(ids) > 30 for ids in line_ids) > 10  # many lines longer than an example
    messages = []
    metadata = build(tmp_path / "corpus", tmp_path / "out", vocab_file, messages=messages)
    records = read_records(all_shards(tmp_path / "out", metadata), 32)
    for r in records:
        check_layout(r, 32)
    kept = [i for r in records for i in r["input_ids"] if i > SEP]
    # Every token of every line is in exactly one example (examples are shuffled: compare as
    # multisets; the builder's own tests check the order).
    assert sorted(kept) == sorted(i for ids in line_ids for i in ids)
    assert metadata["num_tokens"] == metadata["num_tokens_kept"] == len(kept)
    assert metadata["num_tokens_cut"] == 0 and metadata["official_truncation"] is False
    assert metadata["num_example_tokens"] == len(kept) + sum(
        2 + (1 in r["segment_ids"]) for r in records)
    assert any(f"{len(kept):,} kept, 0 cut" in m for m in messages)


def test_official_truncation_reproduces_the_earlier_builder(tmp_path, vocab_file):
    make_corpus(tmp_path / "corpus", num_files=2, docs_per_file=10)
    make_long_lines(tmp_path / "corpus")
    metadata = build(tmp_path / "corpus", tmp_path / "out", vocab_file, num_out_files=2,
                     official_truncation=True)
    # The shards the builder wrote before --official-truncation existed (commit efaeca6).
    assert {name: io_utils.sha256_file(str(tmp_path / "out" / name))
            for name in metadata["shards"]} == {
        "pretrain_data.tfrecord-0-of-2":
            "e3267f3adab5eb9a48333161df96f734533a243b80bcfede5dde49feb17fcb1f",
        "pretrain_data.tfrecord-1-of-2":
            "61dd06d40ccc32bd97d0cc5c8b134e9755df77800725e93059c5e73f574ad878"}
    assert (metadata["num_examples"], metadata["num_tokens"]) == (53, 2444)
    cut = metadata["num_tokens_cut"]
    assert cut > 0 and metadata["num_tokens_kept"] + cut == metadata["num_tokens"]
    assert metadata["official_truncation"] is True
    assert metadata["config"]["official_truncation"] is True


def test_a_build_of_the_earlier_builder_resumes_with_official_truncation(tmp_path, vocab_file):
    """Its record has no official_truncation key and its shard stats no kept/cut counts."""
    make_corpus(tmp_path / "corpus", num_files=4, docs_per_file=10)
    make_long_lines(tmp_path / "corpus")
    out = tmp_path / "out"
    fresh = build(tmp_path / "corpus", out, vocab_file, num_out_files=3, official_truncation=True)
    state = out / ".build_state"
    record = json.loads((state / "config.json").read_text())
    del record["official_truncation"]
    (state / "config.json").write_text(json.dumps(record))
    stats_files = sorted(state.glob("pretrain_data.tfrecord-*.json"))
    assert len(stats_files) == 3
    for stats in stats_files:
        values = json.loads(stats.read_text())
        del values["tokens_kept"], values["tokens_cut"]
        stats.write_text(json.dumps(values))
    os.remove(out / "pretrain_data.tfrecord-1-of-3")
    resumed = build(tmp_path / "corpus", out, vocab_file, num_out_files=3,
                    official_truncation=True)
    for key in ("shards", "num_tokens", "num_tokens_kept", "num_tokens_cut", "num_examples"):
        assert resumed[key] == fresh[key], key


def test_documents_make_separate_examples(tmp_path, vocab_file):
    corpus_dir = tmp_path / "corpus"
    corpus_dir.mkdir()
    # Two short documents, a whitespace-only separator, unicode and control characters.
    (corpus_dir / "a.txt").write_text("w1 w2.\nCAF\u00c9 \u535a\n \t \nw3\x00 w4\n", encoding="utf-8")
    metadata = build(corpus_dir, tmp_path / "out", vocab_file, max_seq_length=16)
    records = read_records(all_shards(tmp_path / "out", metadata), 16)
    got = sorted(tuple(r["input_ids"][:sum(r["input_mask"])]) for r in records)
    w = {word: VOCAB.index(word) for word in ("w1", "w2", "w3", "w4", ".", "cafe", "\u535a")}
    assert got == sorted([(CLS, w["w1"], w["w2"], w["."], w["cafe"], w["\u535a"], SEP),
                          (CLS, w["w3"], w["w4"], SEP)])
    assert all(r["segment_ids"] == [0] * 16 for r in records)  # short documents: one segment
    # With blank lines not separating documents the file is one stream: one example.
    metadata = build(corpus_dir, tmp_path / "out2", vocab_file, max_seq_length=16,
                     blanks_separate_docs=False)
    assert metadata["num_examples"] == 1


def test_compressed_and_openwebtext_inputs(tmp_path, vocab_file):
    corpus_dir = tmp_path / "corpus"
    corpus_dir.mkdir()
    (corpus_dir / "a.txt.gz").write_bytes(gzip.compress(b"w1 w2\n\nw3\n"))
    (corpus_dir / "b.xz").write_bytes(lzma.compress(b"w4 w5\n"))
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:xz") as tar:
        for i, text in enumerate([b"w6\n\nw7\n", b"w8\n"]):  # blank lines inside a member do not split
            info = tarfile.TarInfo(f"{i:04d}.txt")
            info.size = len(text)
            tar.addfile(info, io.BytesIO(text))
    (corpus_dir / "urlsf_subset00-1_data.xz").write_bytes(buffer.getvalue())
    metadata = build(corpus_dir, tmp_path / "out", vocab_file, max_seq_length=16)
    records = read_records(all_shards(tmp_path / "out", metadata), 16)
    words = sorted(tokenization.FullTokenizer(vocab_file).convert_ids_to_tokens(
        [i for r in records for i in r["input_ids"] if i > SEP]))
    assert words == [f"w{i}" for i in range(1, 9)]
    assert metadata["num_examples"] == 5  # a.txt.gz: 2 documents, b.xz: 1, the archive: 2


def test_resume_rebuilds_only_the_missing_shard(tmp_path, vocab_file):
    make_corpus(tmp_path / "corpus", num_files=6, docs_per_file=10)
    out = tmp_path / "out"
    first = build(tmp_path / "corpus", out, vocab_file, num_out_files=4, eval_fraction=0.25)
    shards = all_shards(out, first)
    contents = {p.name: p.read_bytes() for p in shards}
    stamps = {p.name: p.stat().st_mtime_ns for p in shards}
    os.remove(shards[2])
    messages = []
    second = build(tmp_path / "corpus", out, vocab_file, num_out_files=4, eval_fraction=0.25,
                   messages=messages)
    assert any("3 of 4 shards are already complete" in m for m in messages)
    for p in shards:
        assert p.read_bytes() == contents[p.name]
        if p != shards[2]:
            assert p.stat().st_mtime_ns == stamps[p.name]  # untouched
    assert second["shards"] == first["shards"] and second["eval_files"] == first["eval_files"]
    assert not [n for n in os.listdir(out) if ".tmp" in n]
    # Without --num-out-files, a resumed build keeps the earlier shard count.
    third = build(tmp_path / "corpus", out, vocab_file, num_out_files=None, eval_fraction=0.25)
    assert third["num_out_files"] == 4


def test_deterministic_across_runs_and_process_counts(tmp_path, vocab_file):
    make_corpus(tmp_path / "corpus", num_files=4, docs_per_file=12)
    make_long_lines(tmp_path / "corpus")  # lines split into sentences and carried over
    one = build(tmp_path / "corpus", tmp_path / "p1", vocab_file, num_out_files=3, seed=7)
    two = build(tmp_path / "corpus", tmp_path / "p2", vocab_file, num_out_files=3, seed=7,
                num_processes=2)
    other = build(tmp_path / "corpus", tmp_path / "p3", vocab_file, num_out_files=3, seed=8)
    for name in one["shards"]:
        assert (tmp_path / "p1" / name).read_bytes() == (tmp_path / "p2" / name).read_bytes()
    assert one["shards"] == two["shards"]
    assert any((tmp_path / "p1" / n).read_bytes() != (tmp_path / "p3" / n).read_bytes()
               for n in one["shards"])


def test_worker_processes_read_and_write_through_urls(tmp_path, vocab_file, monkeypatch):
    """A corpus in a bucket and shards written to one, by --num-processes 2: file:// URLs go
    through tf.io.gfile (Python's os cannot open them) and, unlike ram://, are shared between
    processes. The shards are the bytes a local build writes, and nothing lands in the working
    directory (a `file:` directory there would mean a path was taken for a local one)."""
    make_corpus(tmp_path / "corpus", num_files=4, docs_per_file=12)
    with gzip.open(tmp_path / "corpus" / "more.txt.gz", "wt", encoding="utf-8") as f:
        f.write("\n".join(make_corpus(tmp_path / "scratch", num_files=1, seed=3)))
    # One process here: the shards do not depend on the process count (tested above).
    local = build(tmp_path / "corpus", tmp_path / "local", vocab_file, num_out_files=3, seed=7)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    url = lambda p: "file://" + str(p)
    # A worker killed on the way stops the build at once (it used to wait forever); the next
    # build resumes it.
    _kill_the_worker_of_group_0(monkeypatch, tmp_path)
    with pytest.raises(workers.WorkerDied, match=r"was killed by SIGKILL .* while building "
                                                 r"pretrain_data\.tfrecord-0-of-3"):
        build(url(tmp_path / "corpus"), url(tmp_path / "bucket" / "out"), url(vocab_file),
              num_out_files=3, seed=7, num_processes=2)
    monkeypatch.undo()
    monkeypatch.chdir(cwd)
    remote = build(url(tmp_path / "corpus"), url(tmp_path / "bucket" / "out"), url(vocab_file),
                   num_out_files=3, seed=7, num_processes=2)
    assert os.listdir(cwd) == []
    assert remote["shards"] == local["shards"] and remote["corpus"]["dir"].startswith("file://")
    for name in local["shards"]:
        assert (tmp_path / "bucket" / "out" / name).read_bytes() == \
            (tmp_path / "local" / name).read_bytes()
    assert not [n for n in os.listdir(tmp_path / "bucket" / "out") if ".tmp" in n]


def test_eval_split_holds_out_whole_documents(tmp_path, vocab_file):
    corpus_dir = tmp_path / "corpus"
    corpus_dir.mkdir()
    # Each file uses its own words, so a held-out file's words must never appear in training.
    for f in range(10):
        docs = [" ".join(f"w{f * 30 + (d * 3 + k) % 30}" for k in range(8)) for d in range(5)]
        (corpus_dir / f"f{f}.txt").write_text("\n\n".join(docs) + "\n", encoding="utf-8")
    metadata = build(corpus_dir, tmp_path / "out", vocab_file, num_out_files=10, eval_fraction=0.1)
    assert metadata["eval_files"] == ["pretrain_data.tfrecord-9-of-10"]
    train, evals = pretrain_data.split_files(str(tmp_path / "out"))
    assert len(train) == 9 and [os.path.basename(p) for p in evals] == metadata["eval_files"]
    ids = lambda paths: {i for r in read_records(paths, 32) for i in r["input_ids"] if i > SEP}
    eval_ids, train_ids = ids(evals), ids(train)
    assert eval_ids and train_ids and not eval_ids & train_ids
    assert metadata["num_eval_examples"] == 5
    assert metadata["num_train_examples"] + 5 == metadata["num_examples"] == 50


def test_metadata_records_the_build(tmp_path, vocab_file):
    make_corpus(tmp_path / "corpus")
    metadata = build(tmp_path / "corpus", tmp_path / "out", vocab_file, num_out_files=2,
                     eval_fraction=0.02, seed=3)
    on_disk = json.loads((tmp_path / "out" / "metadata.json").read_text())
    assert on_disk == metadata
    assert metadata["format_version"] == pretrain_data.FORMAT_VERSION
    assert metadata["vocab_file"] == os.path.abspath(vocab_file)
    assert metadata["vocab_sha256"] == io_utils.sha256_file(vocab_file)
    assert (metadata["tokenizer"], metadata["do_lower_case"], metadata["strip_accents"]) == (
        "wordpiece", True, True)
    assert (metadata["max_seq_length"], metadata["seed"], metadata["num_out_files"]) == (32, 3, 2)
    assert metadata["eval_files"] == ["pretrain_data.tfrecord-1-of-2"]  # >= 1 shard when >= 2
    assert sum(s["examples"] for s in metadata["shards"].values()) == metadata["num_examples"]
    assert sum(s["tokens"] for s in metadata["shards"].values()) == metadata["num_tokens"]
    assert metadata["special_ids"] == {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "[MASK]": 4}


def test_auto_shard_count_is_announced(tmp_path, vocab_file):
    make_corpus(tmp_path / "corpus", num_files=2)
    messages = []
    metadata = build(tmp_path / "corpus", tmp_path / "out", vocab_file, num_out_files=None,
                     eval_fraction=0.02, messages=messages)
    assert metadata["num_out_files"] == 1  # a few KB of text: one shard, no held-out split
    assert any(m.startswith("Writing 1 shards for") for m in messages)
    assert any(m.startswith(f"Warning: no held-out split: --corpus-dir {tmp_path / 'corpus'} "
                            "(2 file(s), ") and "pass --num-out-files 2 or more" in m
               for m in messages)
    assert dataset_builder.auto_num_out_files(54e6, 2, 0.02) == 50
    assert dataset_builder.auto_num_out_files(40e9, 1, 0.02) == 1193
    assert dataset_builder.auto_num_out_files(1e6, 1, 0.0) == 4


def test_a_corpus_too_small_for_a_held_out_split_says_so(tmp_path, vocab_file):
    """One small file is one piece of work, and a held-out split needs two: the warning names
    the corpus, its size and what to change (it used to say only "No held-out split: the corpus
    gives only 1 piece(s) of work for 2 shard(s)")."""
    make_corpus(tmp_path / "corpus", num_files=1)
    messages = []
    metadata = build(tmp_path / "corpus", tmp_path / "out", vocab_file, num_out_files=2,
                     eval_fraction=0.02, messages=messages)
    assert metadata["eval_files"] == []
    size = (tmp_path / "corpus" / "part_0.txt").stat().st_size
    warning = [m for m in messages if m.startswith("Warning: no held-out split")]
    assert warning == [
        f"Warning: no held-out split: --corpus-dir {tmp_path / 'corpus'} (1 file(s), "
        f"{size / 1e6:.3g} MB) is too small to hold out --eval-fraction 0.02 of it: it makes "
        "one piece of work (a single file under 128 KB is not split) and a held-out split "
        "needs two. Add text (another file), or pass --eval-fraction 0 to build without one "
        "(pre-training then evaluates only with hparam eval_tfrecords)"]


# ---------------------------------------------------------------------------------------------
# Bad input and refusals.

def test_bad_file_stops_or_is_skipped(tmp_path, vocab_file, capsys):
    lines = make_corpus(tmp_path / "corpus", num_files=2)
    (tmp_path / "corpus" / "zbad.txt").write_bytes(b"w1 w2\nw3 \xe9t\xe9\n")
    args = ["--corpus-dir", str(tmp_path / "corpus"), "--vocab-file", vocab_file,
            "--output-dir", str(tmp_path / "out"), "--num-out-files", "1", "--no-progress"]
    assert build_pretraining_dataset.main(args) == 2
    err = capsys.readouterr().err
    assert "zbad.txt is not valid UTF-8 at byte offset 9" in err and "--skip-bad-files" in err
    assert not [n for n in os.listdir(tmp_path / "out") if n.startswith("pretrain_data")]
    # The same error comes back from a worker process.
    two = ["--corpus-dir", str(tmp_path / "corpus"), "--vocab-file", vocab_file, "--output-dir",
           str(tmp_path / "out2"), "--num-out-files", "2", "--num-processes", "2", "--no-progress"]
    assert build_pretraining_dataset.main(two) == 2
    assert "zbad.txt is not valid UTF-8 at byte offset 9" in capsys.readouterr().err
    assert build_pretraining_dataset.main(args + ["--skip-bad-files"]) == 0
    metadata = json.loads((tmp_path / "out" / "metadata.json").read_text())
    assert [s["file"] for s in metadata["skipped_files"]] == ["zbad.txt"]
    tokenizer = tokenization.FullTokenizer(vocab_file)
    assert metadata["num_tokens"] == sum(len(tokenizer.encode(line)) for line in lines)
    assert "skipped 1 bad file(s)" in capsys.readouterr().out


def test_damaged_archive_with_skip_bad_files(tmp_path, vocab_file):
    corpus_dir = tmp_path / "corpus"
    corpus_dir.mkdir()
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, text in [("a.txt", b"w1 w2\n"), ("b.txt", b"w3 \xff\n"), ("c.txt", b"w4 " * 400)]:
            info = tarfile.TarInfo(name)
            info.size = len(text)
            tar.addfile(info, io.BytesIO(text))
    (corpus_dir / "docs.tar").write_bytes(buffer.getvalue()[:3 * 1024 + 88])  # cut inside c.txt
    (corpus_dir / "plain.txt").write_text("w5 w6\n")
    with pytest.raises(ValueError, match=r"docs\.tar:b\.txt is not valid UTF-8 at byte offset 3"):
        build(corpus_dir, tmp_path / "out", vocab_file)
    metadata = build(corpus_dir, tmp_path / "out2", vocab_file, skip_bad_files=True)
    skipped = {s["file"]: s["error"] for s in metadata["skipped_files"]}
    # A bad member is skipped alone; a truncated archive keeps the members before the damage.
    assert list(skipped) == ["docs.tar:b.txt", "docs.tar"], skipped
    assert "docs.tar:c.txt" in skipped["docs.tar"] and "before the damage" in skipped["docs.tar"]
    records = read_records(all_shards(tmp_path / "out2", metadata), 32)
    words = {i for r in records for i in r["input_ids"] if i > SEP}
    assert words == {VOCAB.index(w) for w in ("w1", "w2", "w5", "w6")}


def test_input_errors(tmp_path, vocab_file):
    with pytest.raises(ValueError, match="--corpus-dir .*nope does not exist"):
        build(tmp_path / "nope", tmp_path / "out", vocab_file)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="holds no input files"):
        build(tmp_path / "empty", tmp_path / "out", vocab_file)
    (tmp_path / "blank").mkdir()
    (tmp_path / "blank" / "a.txt").write_text("\n  \n\t\n\x00\n")
    with pytest.raises(ValueError, match=r"no examples were produced from the 1 file\(s\)"):
        build(tmp_path / "blank", tmp_path / "out_blank", vocab_file)
    make_corpus(tmp_path / "corpus")
    partial = tmp_path / "partial.txt"
    partial.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\nw1\n")
    with pytest.raises(ValueError, match=r"partial\.txt is missing the special token\(s\) \[MASK\]"):
        build(tmp_path / "corpus", tmp_path / "out_partial", str(partial))
    with pytest.raises(ValueError, match="give exactly one of --vocab-file"):
        build(tmp_path / "corpus", tmp_path / "out", None)
    with pytest.raises(ValueError, match="--max-seq-length must be at least 5"):
        build(tmp_path / "corpus", tmp_path / "out", vocab_file, max_seq_length=3)
    with pytest.raises(ValueError, match="is inside --corpus-dir"):
        build(tmp_path / "corpus", tmp_path / "corpus" / "out", vocab_file)


def test_refuses_output_of_another_configuration(tmp_path, vocab_file):
    make_corpus(tmp_path / "corpus")
    build(tmp_path / "corpus", tmp_path / "out", vocab_file)
    with pytest.raises(ValueError, match=r"holds shards built with other settings \(max_seq_length: "
                                         r"32 before, 64 now\)"):
        build(tmp_path / "corpus", tmp_path / "out", vocab_file, max_seq_length=64)
    (tmp_path / "corpus" / "new.txt").write_text("w1 w2\n")
    with pytest.raises(ValueError, match="official_truncation: False before, True now"):
        build(tmp_path / "corpus", tmp_path / "out", vocab_file, official_truncation=True)
    with pytest.raises(ValueError, match="corpus: "):
        build(tmp_path / "corpus", tmp_path / "out", vocab_file)
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "pretrain_data.tfrecord-0-of-1000").write_bytes(b"")
    with pytest.raises(ValueError, match="already holds 1 pre-training shards but no build record"):
        build(tmp_path / "corpus", foreign, vocab_file)


def test_command_line_flags(tmp_path, vocab_file, capsys):
    parser = build_pretraining_dataset.make_parser()
    base = ["--corpus-dir", "c", "--output-dir", "o", "--vocab-file", "v"]
    # A real boolean: "False" means false (the official type=bool read it as True).
    assert parser.parse_args(base + ["--blanks-separate-docs", "False"]).blanks_separate_docs is False
    assert parser.parse_args(base + ["--blanks-separate-docs"]).blanks_separate_docs is True
    assert parser.parse_args(base + ["--no-blanks-separate-docs"]).blanks_separate_docs is False
    assert parser.parse_args(base).blanks_separate_docs is None
    args = parser.parse_args(base + ["--no-lower-case", "--no-strip-accents"])
    assert (args.do_lower_case, args.strip_accents) == (False, False)
    assert parser.parse_args(base).do_lower_case is True
    assert parser.parse_args(base + ["--do-strip-accents"]).strip_accents is True
    assert parser.parse_args(base).official_truncation is False
    assert parser.parse_args(base + ["--official-truncation"]).official_truncation is True
    with pytest.raises(SystemExit):
        parser.parse_args(base + ["--blanks-separate-docs", "maybe"])
    assert "expected true or false, got 'maybe'" in capsys.readouterr().err
    help_text = parser.format_help()
    for flag in ("--corpus-dir", "--vocab-file", "--output-dir", "--max-seq-length",
                 "--num-processes", "--blanks-separate-docs", "--do-lower-case", "--no-lower-case",
                 "--strip-accents", "--no-strip-accents", "--num-out-files", "--spm-model",
                 "--vocab-size", "--eval-fraction", "--seed", "--skip-bad-files",
                 "--official-truncation"):
        assert flag in help_text
    assert help_text.count("Example:") >= 10


def test_vocab_size_trains_sentencepiece(tmp_path):
    make_corpus(tmp_path / "corpus", num_files=2, docs_per_file=40)
    cfg = dataset_builder.BuildConfig(
        corpus_dir=str(tmp_path / "corpus"), output_dir=str(tmp_path / "out"), vocab_size=120,
        max_seq_length=32, num_out_files=2, eval_fraction=0.0, show_progress=False,
        log=lambda m: None)
    metadata = dataset_builder.build_dataset(cfg)
    model = tmp_path / "out" / "spm.model"
    assert metadata["tokenizer"] == "sentencepiece" and metadata["vocab_file"] == str(model)
    assert metadata["special_ids"] == {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "[MASK]": 4}
    assert metadata["vocab_size"] == 120 and metadata["do_lower_case"] is True
    records = read_records(all_shards(tmp_path / "out", metadata), 32)
    assert len(records) == metadata["num_examples"] and all(r["input_ids"][0] == 2 for r in records)
    # A second run resumes with the same model instead of training another.
    stamp = model.stat().st_mtime_ns
    assert dataset_builder.build_dataset(cfg)["vocab_sha256"] == metadata["vocab_sha256"]
    assert model.stat().st_mtime_ns == stamp


def test_a_build_killed_while_retraining_the_vocabulary_does_not_reuse_the_old_one(
        tmp_path, monkeypatch):
    make_corpus(tmp_path / "corpus", num_files=1, docs_per_file=30)

    def config(vocab_size):
        return dataset_builder.BuildConfig(
            corpus_dir=str(tmp_path / "corpus"), output_dir=str(tmp_path / "out"),
            vocab_size=vocab_size, max_seq_length=32, num_out_files=1, eval_fraction=0.0,
            show_progress=False, log=lambda m: None)

    class Killed(Exception):
        pass

    def killed(*args, **kwargs):
        raise Killed()

    # A build with 100 pieces stops after its vocabulary (before any shard) ...
    monkeypatch.setattr(dataset_builder, "make_plan", killed)
    with pytest.raises(Killed):
        dataset_builder.build_dataset(config(100))
    monkeypatch.undo()
    # ... and a build with 110 is killed while training its own.
    monkeypatch.setattr(dataset_builder.tokenization, "train_sentencepiece", killed)
    with pytest.raises(Killed):
        dataset_builder.build_dataset(config(110))
    monkeypatch.undo()
    assert dataset_builder.build_dataset(config(110))["vocab_size"] == 110
    assert tokenization.SentencePieceTokenizer(str(tmp_path / "out" / "spm.model")).vocab_size == 110


# ---------------------------------------------------------------------------------------------
# The real corpus and vocabulary.

def test_real_corpus_slice(shared_data, tmp_path):
    corpus_dir = tmp_path / "corpus"
    corpus_dir.mkdir()
    lines = []
    for i in (3, 40):
        with open(shared_data / "pretrain_corpus" / f"enwiki_wiki_{i:02d}.txt", encoding="utf-8") as f:
            part = [next(f) for _ in range(400)]
        (corpus_dir / f"slice_{i}.txt").write_text("".join(part), encoding="utf-8")
        lines += part
    vocab = str(shared_data / "vocab" / "bert-uncased-vocab.txt")
    metadata = build(corpus_dir, tmp_path / "out", vocab, max_seq_length=128, num_out_files=3,
                     eval_fraction=0.3)
    import tensorflow as tf

    train, evals = pretrain_data.split_files(str(tmp_path / "out"))
    assert len(train) == 2 and len(evals) == 1
    dataset = tf.data.TFRecordDataset(train + evals).map(
        lambda r: pretrain_data.parse_pretrain_example(r, 128)).batch(16)
    count = 0
    unk = 0
    for batch in dataset:
        assert batch["input_ids"].dtype == tf.int32 and batch["input_ids"].shape[1] == 128
        assert (batch["input_ids"][:, 0].numpy() == 101).all()
        count += batch["input_ids"].shape[0]
        unk += int(tf.reduce_sum(tf.cast(batch["input_ids"] == 100, tf.int32)))
    assert count == metadata["num_examples"] > 100
    assert unk < 0.002 * metadata["num_example_tokens"]
    tokenizer = tokenization.FullTokenizer(vocab)
    assert metadata["num_tokens"] == sum(len(tokenizer.encode(line)) for line in lines)
    # Long paragraphs are split, not cut: every token is kept.
    assert metadata["num_tokens_kept"] == metadata["num_tokens"] and metadata["num_tokens_cut"] == 0



def _kill_the_worker_of_group_0(monkeypatch, tmp_path) -> pathlib.Path:
    """Makes the build's worker process that takes group 0 SIGKILL itself (tests/worker_faults.py);
    returns the file where it writes the time of its death."""
    from tests import worker_faults

    killed_at = tmp_path / "killed_at"
    monkeypatch.setenv("WORKER_FAULT_TIME_FILE", str(killed_at))
    monkeypatch.setattr(dataset_builder.example_builder, "build_group",
                        worker_faults.build_group_then_die_on_group_0)
    return killed_at


def test_a_killed_worker_stops_the_build_at_once_and_a_rerun_completes_it(
        tmp_path, vocab_file, monkeypatch, capsys):
    """A worker killed by SIGKILL (as the out-of-memory killer would) used to leave the parent
    waiting forever without a word (multiprocessing.Pool replaced the worker and lost its task).
    Now the build stops within a second with exit status 4, naming the worker's signal and the
    shard it was building; the re-run keeps the complete shards and ends with the bytes of an
    unbroken build. (On URL outputs: test_worker_processes_read_and_write_through_urls.)"""
    make_corpus(tmp_path / "corpus", num_files=4, docs_per_file=8)
    reference = build(tmp_path / "corpus", tmp_path / "reference", vocab_file, num_out_files=4)
    out = tmp_path / "out"
    argv = ["--corpus-dir", str(tmp_path / "corpus"), "--vocab-file", vocab_file,
            "--output-dir", str(out), "--max-seq-length", "32", "--num-out-files", "4",
            "--eval-fraction", "0", "--num-processes", "2", "--no-progress"]
    killed_at = _kill_the_worker_of_group_0(monkeypatch, tmp_path)
    assert build_pretraining_dataset.main(argv) == workers.EXIT_WORKER_DIED
    stopped_after = time.time() - float(killed_at.read_text())
    err = capsys.readouterr().err
    assert re.search(r"worker process \d+ was killed by SIGKILL \(the kernel's out-of-memory "
                     r"killer sends it when memory runs out\) while building "
                     r"pretrain_data\.tfrecord-0-of-4\. The shards completed so far are kept: "
                     r"re-run the same command", err), err
    assert stopped_after < 2.0
    assert not (out / "metadata.json").exists()
    kept = sorted(n for n in os.listdir(out) if n.startswith("pretrain_data"))
    assert "pretrain_data.tfrecord-0-of-4" not in kept

    monkeypatch.undo()
    assert build_pretraining_dataset.main(argv) == 0
    if kept:
        assert f"{len(kept)} of 4 shards are already complete" in capsys.readouterr().out
    for name in reference["shards"]:
        assert (out / name).read_bytes() == (tmp_path / "reference" / name).read_bytes()
    assert not [n for n in os.listdir(out) if ".tmp" in n]
