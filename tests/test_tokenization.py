"""Tests for model/tokenization.py: BERT WordPiece behaviour, fast path == reference, SentencePiece."""
import os
import pathlib
import tempfile
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from model import tokenization

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "benchmarks"))
import wordpiece_reference  # noqa: E402

TINY_VOCAB = [
    "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]",
    "want", "##want", "##ed", "wa", "un", "runn", "##ing", ",", "!", "?", "'", "t", "don",
    "hello", "how", "are", "you", "a", "##a", "b", "c", "d", "x", "zz", "ah",
    "\u535a", "\u63a8", "caf", "##e", "\u00e9", "##\u00e9", "HaLLo", "\u00e0",
]


def write_vocab(tmp_path: pathlib.Path, tokens, name="vocab.txt") -> str:
    path = tmp_path / name
    path.write_text("".join(t + "\n" for t in tokens), encoding="utf-8")
    return str(path)


@pytest.fixture
def tiny_vocab(tmp_path) -> str:
    return write_vocab(tmp_path, TINY_VOCAB)


def test_full_tokenizer_bert_example(tiny_vocab):
    tok = tokenization.FullTokenizer(tiny_vocab, do_lower_case=True)
    tokens = tok.tokenize("UNwant\u00e9d,running")
    assert tokens == ["un", "##want", "##ed", ",", "runn", "##ing"]
    ids = tok.convert_tokens_to_ids(tokens)
    assert ids == [9, 6, 7, 12, 10, 11]
    assert tok.encode("UNwant\u00e9d,running") == ids
    assert tok.convert_ids_to_tokens(ids) == tokens


def test_special_ids_and_sizes(tiny_vocab):
    tok = tokenization.FullTokenizer(tiny_vocab)
    assert (tok.pad_id, tok.unk_id, tok.cls_id, tok.sep_id, tok.mask_id) == (0, 1, 2, 3, 4)
    assert tok.vocab_size == len(TINY_VOCAB)
    assert list(tok.vocab) == TINY_VOCAB  # ordered by id
    assert tok.inv_vocab[5] == "want"


@pytest.mark.parametrize("lower, strip, text, expected", [
    # Lower-casing, whitespace of every kind, punctuation.
    (True, None, " \tHeLLo!how  \n Are yoU?  ", ["hello", "!", "how", "are", "you", "?"]),
    (False, None, " \tHeLLo!how  \n Are yoU?  ", ["HeLLo", "!", "how", "Are", "yoU", "?"]),
    # Accents: stripped by default when lower-casing, kept when turned off, and strippable
    # without lower-casing.
    (True, None, "H\u00e9llo", ["hello"]),
    (True, False, "H\u00e9llo", ["h\u00e9llo"]),
    (False, True, " \tH\u00e4LLo!how", ["HaLLo", "!", "how"]),
    (False, None, "H\u00e4LLo", ["H\u00e4LLo"]),
    (True, None, "\u0130stanbul", ["istanbul"]),  # dotted capital I: lower() adds U+0307
    # Greek final sigma is chosen by lower() per word, as in BERT.
    (True, None, "\u039f\u0394\u039f\u03a3, \u039f\u0394\u039f\u03a3",
     ["\u03bf\u03b4\u03bf\u03c2", ",", "\u03bf\u03b4\u03bf\u03c2"]),
    # CJK ideographs become words; Hiragana and Hangul do not.
    (True, None, "ah\u535a\u63a8zz", ["ah", "\u535a", "\u63a8", "zz"]),
    (False, None, "\u3053\u3093\u306b\u3061\u306f \ud55c\uad6d\uc5b4",
     ["\u3053\u3093\u306b\u3061\u306f", "\ud55c\uad6d\uc5b4"]),
    # ... and accent stripping (NFD) decomposes Hangul syllables into jamo, as BERT does.
    (True, None, "\ud55c\uad6d\uc5b4", ["\u1112\u1161\u11ab\u1100\u116e\u11a8\u110b\u1165"]),
    # BERT's punctuation: all non-alphanumeric ASCII plus Unicode P*; symbols like EUR are not.
    (True, None, "$5+3^2`x~", ["$", "5", "+", "3", "^", "2", "`", "x", "~"]),
    (True, None, "\u00abquote\u00bb\u2014dash", ["\u00ab", "quote", "\u00bb", "\u2014", "dash"]),
    (True, None, "5\u20ac \u00a92020", ["5\u20ac", "\u00a92020"]),
    (True, None, "don't", ["don", "'", "t"]),
    # Accent stripping happens before punctuation splitting: U+1FEF decomposes to "`".
    (True, None, "\u1fefx", ["`", "x"]),
    (True, False, "\u1fefx", ["\u1fefx"]),
    # Control characters, NUL and U+FFFD vanish; soft hyphen and zero-width space are Cf.
    (True, None, "a\x00b\ufffdc\u200bd\x07e", ["abcde"]),
    (True, None, "co\u00adop", ["coop"]),
    (True, None, "a\u00a0b\u2028c\r\nd", ["a", "b", "c", "d"]),
    # Empty and whitespace-only input.
    (True, None, "", []),
    (True, None, "   \n\t \u3000 ", []),
    (True, None, "\x00\ufffd\x1b", []),
])
def test_basic_tokenizer(lower, strip, text, expected):
    assert tokenization.BasicTokenizer(lower, strip).tokenize(text) == expected


def test_wordpiece_unknown_and_long_words(tmp_path):
    vocab = tokenization.load_vocab(write_vocab(tmp_path, TINY_VOCAB))
    wp = tokenization.WordpieceTokenizer(vocab)
    assert wp.tokenize("unwanted running") == ["un", "##want", "##ed", "runn", "##ing"]
    # A word that cannot be covered completely is one [UNK], not partial pieces.
    assert wp.tokenize("unwantedx") == ["[UNK]"]
    assert wp.tokenize("") == []
    # 100 characters still tokenize; 101 become [UNK].
    assert wp.tokenize("a" * 100) == ["a"] + ["##a"] * 99
    assert wp.tokenize("a" * 101) == ["[UNK]"]


def test_full_tokenizer_tricky_text(tiny_vocab):
    uncased = tokenization.FullTokenizer(tiny_vocab, do_lower_case=True)
    assert uncased.tokenize("Caf\u00e9 \u00e0 ah\u535a!") == ["caf", "##e", "a", "ah", "\u535a", "!"]
    assert uncased.tokenize("a" * 101 + " b") == ["[UNK]", "b"]
    assert uncased.tokenize("xyzzy, a") == ["[UNK]", ",", "a"]
    no_strip = tokenization.FullTokenizer(tiny_vocab, do_lower_case=True, strip_accents=False)
    assert no_strip.tokenize("Caf\u00e9 \u00e0") == ["caf", "##\u00e9", "\u00e0"]
    cased = tokenization.FullTokenizer(tiny_vocab, do_lower_case=False)
    assert cased.tokenize("HaLLo hallo") == ["HaLLo", "[UNK]"]
    # Results are cached per word; a second call must agree with the first.
    assert uncased.tokenize("UNwanted UNwanted") == ["un", "##want", "##ed"] * 2
    assert uncased.tokenize("UNwanted") == ["un", "##want", "##ed"]


def test_load_vocab_errors(tmp_path):
    with pytest.raises(ValueError, match=r"vocab\.txt:4: token 'b' is listed twice \(first on line 2\)"):
        tokenization.load_vocab(write_vocab(tmp_path, ["a", "b", "c", "b"]))
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"[PAD]\nok\n\xff\xfe\n")
    with pytest.raises(ValueError, match=r"bad\.txt:3: vocabulary line is not valid UTF-8"):
        tokenization.load_vocab(str(bad))
    with pytest.raises(ValueError, match="does not exist"):
        tokenization.load_vocab(str(tmp_path / "missing.txt"))
    crlf = tmp_path / "crlf.txt"
    crlf.write_bytes(b"[PAD]\r\nhello\r\n")
    assert tokenization.load_vocab(str(crlf)) == {"[PAD]": 0, "hello": 1}


def test_missing_special_tokens(tmp_path):
    path = write_vocab(tmp_path, ["[PAD]", "[UNK]", "[CLS]", "hello"], name="partial.txt")
    with pytest.raises(ValueError, match=r"partial\.txt is missing the special token\(s\) \[SEP\] \[MASK\]"):
        tokenization.FullTokenizer(path)


def test_conversion_errors(tiny_vocab):
    tok = tokenization.FullTokenizer(tiny_vocab)
    with pytest.raises(ValueError, match="'nope' is not in the vocabulary"):
        tok.convert_tokens_to_ids(["want", "nope"])
    with pytest.raises(ValueError, match="id 999 is outside the vocabulary"):
        tok.convert_ids_to_tokens([999])


def test_build_tokenizer(tiny_vocab):
    tok = tokenization.build_tokenizer(vocab_file=tiny_vocab, do_lower_case=False)
    assert isinstance(tok, tokenization.FullTokenizer) and not tok.do_lower_case
    with pytest.raises(ValueError, match="exactly one"):
        tokenization.build_tokenizer()
    with pytest.raises(ValueError, match="exactly one"):
        tokenization.build_tokenizer(vocab_file=tiny_vocab, spm_model="x.model")


# ---------------------------------------------------------------------------------------------
# The fast path must equal the plain algorithm.

# Characters that stress the whole-text fast path: Greek sigma next to case-ignorable marks
# (final-sigma rule), combining marks, titlecase, expanding lower-case, odd whitespace.
ALPHABET = st.one_of(
    st.sampled_from(list("aAbBcCdDeEzZ \t\n\r,.'!?$`^-\u00e9\u00c9\u00e0\u00df\u0130\u03a3\u03c3"
                         "\u03c2\u0391\u00b7\u0345\u0307\u0300\u02b9\u01c5\u1fef\u037e\u0387"
                         "\u535a\u63a8\u3053\ud55c\u00ad\u200b\u00a0\u2028\u2029\u3000\x1c\x85"
                         "\x00\ufffd\x07\u0301\u00ab\u20ac\u2000\u212b\u1e9e\ufb01")),
    st.characters(),
)


@settings(max_examples=300, derandomize=True, deadline=None)
@given(text=st.text(alphabet=ALPHABET, max_size=40), lower=st.booleans(),
       strip=st.sampled_from([None, True, False]))
def test_fast_equals_reference_on_random_text(text, lower, strip):
    fast, ref = _tiny_pair(lower, strip)
    assert fast.tokenize(text) == ref.tokenize(text)


_PAIRS = {}


def _tiny_pair(lower, strip):
    """Cached (fast, reference) tokenizers over the tiny vocab, written once per session."""
    key = (lower, strip)
    if key not in _PAIRS:
        directory = pathlib.Path(tempfile.mkdtemp(prefix="tokvocab"))
        path = write_vocab(directory, TINY_VOCAB + ["##" + c for c in "bcdz"])
        _PAIRS[key] = (tokenization.FullTokenizer(path, lower, strip),
                       wordpiece_reference.ReferenceWordpiece(path, lower, strip))
    return _PAIRS[key]


# ---------------------------------------------------------------------------------------------
# Real data.

def _real_lines(shared_data, files=(0, 17, 42), lines_per_file=300):
    lines = []
    for i in files:
        path = shared_data / "pretrain_corpus" / f"enwiki_wiki_{i:02d}.txt"
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f):
                if n >= lines_per_file:
                    break
                lines.append(line)
    return lines


def test_real_vocab_paragraph(shared_data):
    vocab = str(shared_data / "vocab" / "bert-uncased-vocab.txt")
    tok = tokenization.FullTokenizer(vocab)
    assert tok.vocab_size == 30522
    assert (tok.pad_id, tok.unk_id, tok.cls_id, tok.sep_id, tok.mask_id) == (0, 100, 101, 102, 103)
    with open(shared_data / "pretrain_corpus" / "enwiki_wiki_00.txt", encoding="utf-8") as f:
        paragraph = f.readline()
    assert paragraph.startswith("Jarred Shaw (born September 28, 1990)")
    tokens = tok.tokenize(paragraph)
    assert "[UNK]" not in tokens
    assert tokens[:10] == ["jar", "##red", "shaw", "(", "born", "september", "28", ",", "1990", ")"]
    assert "basketball" in tokens and "professional" in tokens
    # Every common word of the whole first file is in the vocabulary as a single piece.
    common = "the of and in to was is for on as with by he at from his an were are which".split()
    for word in common:
        assert tok.tokenize(word.capitalize()) == [word]
    text = "".join(_real_lines(shared_data, files=(0,), lines_per_file=200))
    ids = tok.encode(text)
    assert ids.count(tok.unk_id) / len(ids) < 0.001


@pytest.mark.parametrize("lower, strip", [(True, None), (False, None), (True, False), (False, True)])
def test_fast_equals_reference_on_real_text(shared_data, lower, strip):
    vocab = str(shared_data / "vocab" / "bert-uncased-vocab.txt")
    fast = tokenization.FullTokenizer(vocab, lower, strip)
    ref = wordpiece_reference.ReferenceWordpiece(vocab, lower, strip)
    lines = _real_lines(shared_data, lines_per_file=150 if strip is not None else 400)
    mismatches = [line for line in lines if fast.tokenize(line) != ref.tokenize(line)]
    assert not mismatches, mismatches[:3]
    # Ids through the cached encode path match the tokens.
    for line in lines[:50]:
        assert fast.encode(line) == fast.convert_tokens_to_ids(ref.tokenize(line))


# ---------------------------------------------------------------------------------------------
# SentencePiece.

def _training_sentences():
    words = ("the quick brown fox jumps over lazy dog pack my box with five dozen liquor jugs "
             "sphinx of black quartz judge vow how vexingly quick daft zebras jump").split()
    out = []
    for i in range(400):
        out.append(" ".join(words[(i * 7 + k * 3) % len(words)] for k in range(6 + i % 5)) + ".")
    return out


@pytest.fixture(scope="module")
def spm_model(tmp_path_factory) -> str:
    prefix = str(tmp_path_factory.mktemp("spm") / "tiny")
    return tokenization.train_sentencepiece(_training_sentences(), prefix, vocab_size=50,
                                            do_lower_case=True)


def test_sentencepiece_round_trip(spm_model):
    tok = tokenization.SentencePieceTokenizer(spm_model, do_lower_case=True)
    assert (tok.pad_id, tok.unk_id, tok.cls_id, tok.sep_id, tok.mask_id) == (0, 1, 2, 3, 4)
    assert tok.convert_ids_to_tokens([0, 1, 2, 3, 4]) == list(tokenization.SPECIAL_TOKENS)
    assert tok.vocab_size == 50
    text = "The quick brown fox jumps over the lazy dog."
    pieces = tok.tokenize(text)
    ids = tok.encode(text)
    assert len(pieces) == len(ids) > 0
    assert tok.convert_tokens_to_ids(pieces) == ids
    assert tok.convert_ids_to_tokens(ids) == pieces
    assert tok.sp.DecodeIds(ids) == text.lower()
    assert min(ids) >= 5  # ordinary text never produces a special id
    # A literal "[SEP]" in text is not the separator; unseen characters map to [UNK].
    assert tok.sep_id not in tok.encode("fox [SEP] dog")
    assert tok.unk_id in tok.encode("fox \u4e00 dog")
    assert tokenization.build_tokenizer(spm_model=spm_model, do_lower_case=True).vocab == tok.vocab


def test_sentencepiece_errors(tmp_path, spm_model):
    import sentencepiece as spm
    prefix = str(tmp_path / "plain")
    spm.SentencePieceTrainer.Train(sentence_iterator=iter(_training_sentences()),
                                   model_prefix=prefix, vocab_size=40, minloglevel=2)
    with pytest.raises(ValueError, match=r"plain\.model is missing the special token\(s\) "
                                         r"\[PAD\] \[UNK\] \[CLS\] \[SEP\] \[MASK\]"):
        tokenization.SentencePieceTokenizer(prefix + ".model")
    with pytest.raises(ValueError, match="vocab_size=100000 failed"):
        tokenization.train_sentencepiece(_training_sentences(), str(tmp_path / "big"), 100000)
    with pytest.raises(ValueError, match="strip_accents applies to WordPiece"):
        tokenization.build_tokenizer(spm_model=spm_model, strip_accents=True)


def test_a_sentencepiece_model_path_works_wherever_a_vocab_file_does(tmp_path):
    words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "theta", "kappa"]
    sentences = [" ".join(words[(i + j) % 8] for j in range(6)) for i in range(400)]
    model_path = tokenization.train_sentencepiece(sentences, str(tmp_path / "spm"), vocab_size=25)
    tokenizer = tokenization.build_tokenizer(vocab_file=model_path)
    assert isinstance(tokenizer, tokenization.SentencePieceTokenizer)
    vocab = tokenization.load_vocab(model_path)
    assert vocab == tokenizer.vocab and vocab["[MASK]"] == tokenizer.mask_id
    (tmp_path / "model_dir").mkdir()
    assert tokenization.find_vocab_file(str(tmp_path / "model_dir")) is None
    os.replace(model_path, tmp_path / "model_dir" / "spm.model")
    assert tokenization.find_vocab_file(str(tmp_path / "model_dir")).endswith("spm.model")
