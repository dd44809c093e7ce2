"""Unit tests of the data-building pieces: ExampleBuilder rules, record bytes, corpus reading."""
import bz2
import gzip
import io
import lzma
import random
import tarfile

import pytest

from pretrain import pretrain_data
from pretrain.builder import corpus, example_builder

CLS, SEP = 1, 2


class ScriptedRandom:
    """Stands in for random.Random: returns scripted values and fails if asked for more."""

    def __init__(self, randoms, randints=()):
        self.randoms = list(randoms)
        self.randints = list(randints)

    def random(self):
        return self.randoms.pop(0)

    def randint(self, low, high):
        value = self.randints.pop(0)
        assert low <= value <= high
        return value


# ---------------------------------------------------------------------------------------------
# ExampleBuilder: the official rules, step by step with scripted random draws.

def test_two_segments_and_truncation():
    rng = ScriptedRandom([0.5, 0.9, 0.9])  # two segments; overflowing sentence not in A; full target
    b = example_builder.ExampleBuilder(16, CLS, SEP, rng, official_truncation=True)
    assert b.add_sentence([10, 11, 12]) == []
    assert b.add_sentence([13, 14, 15, 16]) == []
    assert b.add_sentence([17, 18, 19, 20, 21]) == []
    [ex] = b.add_sentence([22, 23, 24, 25])  # 16 tokens reach the target
    # A's target is (16 - 3) // 2 = 6: A = first sentence; the second would overflow it and
    # the 0.9 draw keeps it out; B = the rest, cut to 16 - 3 - 3 = 10 tokens.
    assert ex.tokens == [CLS, 10, 11, 12, SEP, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, SEP]
    assert ex.num_first == 5 and ex.num_consumed == 16 and ex.num_kept == 13
    assert not ex.single_segment
    assert rng.randoms == [] and b.end_document() == []  # the cut tokens are gone


def test_what_does_not_fit_is_carried_to_the_next_example():
    # The same draws and sentences as above, without official_truncation.
    rng = ScriptedRandom([0.5, 0.9, 0.9, 0.5, 0.9])
    b = example_builder.ExampleBuilder(16, CLS, SEP, rng)
    for sentence in ([10, 11, 12], [13, 14, 15, 16], [17, 18, 19, 20, 21]):
        assert b.add_sentence(sentence) == []
    [ex] = b.add_sentence([22, 23, 24, 25])
    # B has room for 10 tokens: the last sentence gives its first one, the rest waits.
    assert ex.tokens == [CLS, 10, 11, 12, SEP, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, SEP]
    assert ex.num_consumed == ex.num_kept == 13
    [rest] = b.end_document()  # the tail starts the next example
    assert rest.tokens == [CLS, 23, 24, 25, SEP] and rest.num_consumed == 3
    assert rng.randoms == []


def test_overflowing_sentence_joins_first_segment_half_the_time():
    rng = ScriptedRandom([0.5, 0.2, 0.9])  # the 0.2 draw lets the sentence overflow A
    b = example_builder.ExampleBuilder(16, CLS, SEP, rng)
    b.add_sentence([10, 11, 12])
    b.add_sentence([13, 14, 15, 16])
    [ex] = b.end_document()
    assert ex.tokens == [CLS, 10, 11, 12, 13, 14, 15, 16, SEP]
    assert ex.single_segment


def test_single_segment_branch_and_first_segment_cut():
    rng = ScriptedRandom([0.05, 0.9])  # < 0.1: one segment
    b = example_builder.ExampleBuilder(8, CLS, SEP, rng, official_truncation=True)
    [ex] = b.add_sentence(list(range(10, 20)))
    assert ex.tokens == [CLS, 10, 11, 12, 13, 14, 15, SEP]  # A cut to 8 - 2
    assert ex.num_first == 8 and ex.num_consumed == 10 and ex.single_segment
    # By default the 4 tokens past 8 - 2 make the next example (two draws more).
    rng = ScriptedRandom([0.05, 0.9, 0.5, 0.9])
    b = example_builder.ExampleBuilder(8, CLS, SEP, rng)
    [ex] = b.add_sentence(list(range(10, 20)))
    assert ex.tokens == [CLS, 10, 11, 12, 13, 14, 15, SEP] and ex.num_consumed == 6
    assert [e.tokens for e in b.end_document()] == [[CLS, 16, 17, 18, 19, SEP]]


def test_short_target_and_document_end():
    # After the first example a 0.01 draw (< 5%) sets a random target of 7 for the next one.
    rng = ScriptedRandom([0.5, 0.01, 0.5, 0.9], randints=[7])
    b = example_builder.ExampleBuilder(16, CLS, SEP, rng)
    assert b.end_document() == []           # nothing accumulated: no example
    assert b.add_sentence([]) == []          # empty lines add nothing
    assert b.add_sentence([5, 6]) == []
    [first] = b.end_document()               # a document end closes a short example
    assert first.tokens == [CLS, 5, 6, SEP] and first.num_consumed == 2
    assert b.add_sentence([7, 8, 9]) == []
    [ex] = b.add_sentence([10, 11, 12, 13])  # 7 tokens reach the short target
    # A's target is (7 - 3) // 2 = 2: A = [7, 8, 9] (A was empty); the next sentence cannot
    # join A (A is not short of its target), so no draw is made; B = the rest.
    assert ex.tokens == [CLS, 7, 8, 9, SEP, 10, 11, 12, 13, SEP]
    assert rng.randoms == [] and rng.randints == []


@pytest.mark.parametrize("official_truncation", [True, False])
def test_single_segment_ratio_on_a_large_stream(official_truncation):
    rng = random.Random(0)
    b = example_builder.ExampleBuilder(128, CLS, SEP, rng, official_truncation)
    examples = []
    while len(examples) < 20000:
        examples += b.add_sentence([7] * rng.randint(3, 12))
    single = sum(ex.single_segment for ex in examples) / len(examples)
    # 10% by choice, plus the few short-target examples made of a single sentence.
    assert 0.09 < single < 0.115, single
    short = sum(len(ex.tokens) < 100 for ex in examples) / len(examples)
    assert 0.03 < short < 0.07, short  # the 5% random-length targets
    assert all(len(ex.tokens) <= 128 for ex in examples)


@pytest.mark.parametrize("seed", range(5))
def test_default_keeps_every_token_once_and_in_order(seed):
    """Random sentences (some longer than an example) and document ends: the examples hold
    every token exactly once, and an example never holds text from before the previous one."""
    rng = random.Random(seed)
    max_length = rng.choice([8, 16, 32])
    b = example_builder.ExampleBuilder(max_length, CLS, SEP, random.Random(seed + 100))
    fed, examples = [], []
    next_id = 10
    for _ in range(400):
        if rng.random() < 0.1:
            examples += b.end_document()
            continue
        sentence = list(range(next_id, next_id + rng.choice([1, 3, 7, 20, 50])))
        next_id += len(sentence)
        fed += sentence
        examples += b.add_sentence(sentence)
    examples += b.end_document()
    contents = []
    for ex in examples:
        assert len(ex.tokens) <= max_length and ex.tokens[0] == CLS and ex.tokens[-1] == SEP
        assert ex.tokens[ex.num_first - 1] == SEP and ex.tokens.count(SEP) == 2 - ex.single_segment
        content = [t for t in ex.tokens if t not in (CLS, SEP)]
        assert ex.num_kept == ex.num_consumed == len(content) > 0
        contents.append(content)
    assert sorted(t for c in contents for t in c) == fed
    assert all(max(a) < min(b) for a, b in zip(contents, contents[1:]))


def test_a_long_line_is_split_at_sentences_and_kept_whole():
    encode = lambda text: [int(word) for word in text.replace(".", "").split()]
    short = "1 2 3. 4 5"
    assert example_builder.encode_line(short, encode, 8) == [[1, 2, 3, 4, 5]]  # fits: one piece
    # Sentences are tokenized alone; one longer than max_length - 2 is cut into chunks.
    line = "1 2 3. 4 5 6 7 8 9 10 11 12 13 14. 15 16."
    assert example_builder.encode_line(line, encode, 8) == [
        [1, 2, 3], [4, 5, 6, 7, 8, 9], [10, 11, 12, 13, 14], [15, 16]]
    # A line of 3 x max_length tokens in sentences of 1-9 words: every token, in order.
    words = [str(i) for i in range(100, 100 + 3 * 32)]
    rng = random.Random(3)
    sentences, i = [], 0
    while i < len(words):
        n = rng.randint(1, 9)
        sentences.append(" ".join(words[i:i + n]) + ".")
        i += n
    pieces = example_builder.encode_line(" ".join(sentences), encode, 32)
    assert len(pieces) > 3
    b = example_builder.ExampleBuilder(32, CLS, SEP, random.Random(0))
    examples = [ex for piece in pieces for ex in b.add_sentence(piece)] + b.end_document()
    kept = [t for ex in examples for t in ex.tokens if t not in (CLS, SEP)]
    assert kept == list(range(100, 196)) and len(examples) == 4
    # With official_truncation the same line is one example cut at 30 tokens.
    b = example_builder.ExampleBuilder(32, CLS, SEP, random.Random(0), official_truncation=True)
    [ex] = b.add_sentence(encode(" ".join(sentences))) + b.end_document()
    assert ex.num_kept == 30 and ex.num_consumed == 96


def test_max_length_validation():
    with pytest.raises(ValueError, match="max_seq_length must be at least 5, got 4"):
        example_builder.ExampleBuilder(4, CLS, SEP, random.Random(0))


# ---------------------------------------------------------------------------------------------
# Record bytes.

def test_serialized_bytes_match_tensorflow():
    import tensorflow as tf

    tokens = [101, 7, 30000, 102, 9, 200, 102]
    ids = tokens + [0] * 5
    mask = [1] * 7 + [0] * 5
    segments = [0] * 4 + [1] * 3 + [0] * 5
    fast = pretrain_data.serialize_unpadded(tokens, 4, 12)
    assert fast == pretrain_data.serialize_example(ids, mask, segments)
    reference = tf.train.Example(features=tf.train.Features(feature={
        name: tf.train.Feature(int64_list=tf.train.Int64List(value=values))
        for name, values in zip(pretrain_data.FEATURE_NAMES, (ids, mask, segments))}))
    assert tf.train.Example.FromString(fast) == reference
    parsed = pretrain_data.parse_pretrain_example(fast, 12)
    for name, values in zip(pretrain_data.FEATURE_NAMES, (ids, mask, segments)):
        assert parsed[name].dtype == tf.int32 and parsed[name].shape == (12,)
        assert parsed[name].numpy().tolist() == values
    # Ids past the precomputed table and negative values still round-trip.
    odd = pretrain_data.serialize_example([70000, -1, 5], [1, 1, 1], [0, 0, 0])
    assert pretrain_data.parse_pretrain_example(odd, 3)["input_ids"].numpy().tolist() == [70000, -1, 5]
    batch = pretrain_data.parse_pretrain_examples(tf.constant([fast, fast]), 12)
    assert batch["segment_ids"].shape == (2, 12)
    with pytest.raises(ValueError, match="do not fit max_seq_length 3"):
        pretrain_data.serialize_unpadded(tokens, 4, 3)


def test_tfrecord_writer_matches_tensorflow(tmp_path):
    import tensorflow as tf

    from pretrain.builder import tfrecord_writer

    crc = tfrecord_writer.Crc32c()
    assert crc(b"123456789") == 0xE3069283  # the CRC-32C check value
    assert crc(b"") == 0 and crc(b"\x00" * 32) == 0x8A9136AA
    rng = random.Random(0)
    records = [bytes(rng.randrange(256) for _ in range(rng.choice([0, 1, 7, 600, 2500])))
               for _ in range(300)]
    with tfrecord_writer.TFRecordWriter(str(tmp_path / "ours"), batch_size=64) as writer:
        for record in records:
            writer.write(record)
    with tf.io.TFRecordWriter(str(tmp_path / "theirs")) as writer:
        for record in records:
            writer.write(record)
    assert (tmp_path / "ours").read_bytes() == (tmp_path / "theirs").read_bytes()
    read_back = [r.numpy() for r in tf.data.TFRecordDataset(str(tmp_path / "ours"))]
    assert read_back == records


# ---------------------------------------------------------------------------------------------
# Corpus reading.

def _lines(unit):
    return [(doc.name, doc.blank_lines_split, list(doc.lines)) for doc in corpus.iter_documents(unit)]


def _tar_bytes(members, compress=None):
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    data = buffer.getvalue()
    return compress(data) if compress else data


def test_compressed_files_read_like_plain(tmp_path):
    text = "caf\u00e9 one\r\n\nsecond doc \u535a\nlast line without newline"
    raw = text.encode("utf-8")
    for name, data in [("plain.txt", raw), ("a.gz", gzip.compress(raw)), ("b.bz2", bz2.compress(raw)),
                       ("c.txt.xz", lzma.compress(raw)), ("noext", gzip.compress(raw))]:
        (tmp_path / name).write_bytes(data)
    files = corpus.find_input_files(str(tmp_path))
    assert [f.relpath for f in files] == ["a.gz", "b.bz2", "c.txt.xz", "noext", "plain.txt"]
    assert [f.compression for f in files] == ["gzip", "bz2", "xz", "gzip", "text"]
    expected = ["caf\u00e9 one\r", "", "second doc \u535a", "last line without newline"]
    for f in files:
        [(name, split, lines)] = _lines(corpus.Unit(f, 0, f.size))
        assert name == f.relpath and split and lines == expected


def test_openwebtext_layout(tmp_path):
    docs = [("0001.txt", b"para one\n\npara two\n"), ("0002.txt", b"doc two\n")]
    inner = _tar_bytes(docs, lzma.compress)
    (tmp_path / "urlsf_subset00-1_data.xz").write_bytes(inner)
    # The outer archive layout: a tar of such .xz archives.
    (tmp_path / "openwebtext.tar").write_bytes(_tar_bytes([("openwebtext/sub_data.xz", inner)]))
    files = corpus.find_input_files(str(tmp_path))
    assert [(f.compression, f.is_tar) for f in files] == [("text", True), ("xz", True)]
    outer = _lines(corpus.Unit(files[0], 0, files[0].size))
    assert outer == [
        ("openwebtext.tar:openwebtext/sub_data.xz:0001.txt", False, ["para one", "", "para two"]),
        ("openwebtext.tar:openwebtext/sub_data.xz:0002.txt", False, ["doc two"])]
    assert [d[2] for d in _lines(corpus.Unit(files[1], 0, files[1].size))] == [
        ["para one", "", "para two"], ["doc two"]]


def test_not_utf8_names_file_and_offset(tmp_path):
    (tmp_path / "bad.txt").write_bytes(b"good line\nbad \xff here\n")
    (tmp_path / "bad.gz").write_bytes(gzip.compress(b"ok\n\xc3\x28\n"))
    (tmp_path / "arch.tar").write_bytes(_tar_bytes([("d1.txt", b"fine\n"), ("d2.txt", b"x\xfe")]))
    files = {f.relpath: f for f in corpus.find_input_files(str(tmp_path))}
    with pytest.raises(corpus.CorpusError, match=r"bad\.txt is not valid UTF-8 at byte offset 14"):
        corpus.validate_utf8(corpus.Unit(files["bad.txt"], 0, files["bad.txt"].size))
    with pytest.raises(corpus.CorpusError,
                       match=r"bad\.gz \(decompressed\) is not valid UTF-8 at byte offset 3"):
        corpus.validate_utf8(corpus.Unit(files["bad.gz"], 0, files["bad.gz"].size))
    with pytest.raises(corpus.CorpusError, match=r"arch\.tar:d2\.txt is not valid UTF-8 at byte offset 1"):
        corpus.validate_utf8(corpus.Unit(files["arch.tar"], 0, files["arch.tar"].size))


def test_damaged_and_unsupported_inputs(tmp_path):
    (tmp_path / "short.gz").write_bytes(gzip.compress(b"some text\n" * 100)[:-20])
    (tmp_path / "trunc.gz").write_bytes(gzip.compress(b"some text\n" * 100000)[:-20])
    (tmp_path / "x.zip").write_bytes(b"PK\x03\x04rest")
    files = corpus.find_input_files(str(tmp_path))  # problems surface when a file is read
    assert [f.relpath for f in files] == ["short.gz", "trunc.gz", "x.zip"]
    for f, message in zip(files, [r"short\.gz: cannot read or decompress \(gzip\)",
                                  r"trunc\.gz \(decompressed\): cannot read or decompress",
                                  r"x\.zip is a zip archive, which is not supported"]):
        with pytest.raises(corpus.CorpusError, match=message):
            corpus.validate_utf8(corpus.Unit(f, 0, f.size))


def test_find_input_files_errors(tmp_path):
    with pytest.raises(corpus.CorpusError, match="does not exist"):
        corpus.find_input_files(str(tmp_path / "nope"))
    (tmp_path / ".hidden").write_text("x")
    with pytest.raises(corpus.CorpusError, match="holds no input files"):
        corpus.find_input_files(str(tmp_path))
    (tmp_path / "empty.txt").write_text("")
    with pytest.raises(corpus.CorpusError, match="all 1 input files are empty"):
        corpus.find_input_files(str(tmp_path))


@pytest.mark.parametrize("blank_lines", [True, False])
def test_ranges_cover_the_file_and_cut_after_blank_lines(tmp_path, blank_lines):
    rng = random.Random(1)
    lines = []
    for doc in range(300):
        lines += [f"doc {doc} line {i} " + "x" * rng.randint(0, 80) for i in range(rng.randint(1, 6))]
        lines.append("" if doc % 3 else "   ")  # whitespace-only lines are blank too
    (tmp_path / "big.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    [file] = corpus.find_input_files(str(tmp_path))
    units = corpus.split_into_units([file], 4096, blank_lines)
    assert len(units) > 5
    assert units[0].start == 0 and units[-1].end == file.size
    assert all(a.end == b.start for a, b in zip(units, units[1:]))
    pieces = [_lines(u)[0][2] for u in units]
    assert [line for piece in pieces for line in piece] == lines
    if blank_lines:  # every range but the last ends with a blank line: documents stay whole
        assert all(piece[-1].strip() == "" for piece in pieces[:-1])
