"""Property tests: both tokenizers take any unicode text without crashing and give in-vocabulary ids;
WordPiece pieces recombine to the normalised input.

"Normalised" is BERT's basic tokenization, spelled out independently here (`normalised_words`):
  1. cleaning: drop U+0000, U+FFFD and every control character (Unicode category C*: Cc, Cf, Cn,
     Co, Cs) except tab, newline and carriage return; those three and every space separator (Zs)
     become a space;
  2. every CJK Unified Ideograph (the blocks BERT lists) becomes a word of its own;
  3. split on whitespace; per word: lower-case (do_lower_case), then NFD-decompose and drop
     nonspacing marks (Mn) when accents are stripped;
  4. every punctuation character (Unicode P*, plus the ASCII symbols ! to /, : to @, [ to `,
     { to ~) becomes a word of its own.
Recombining pieces means gluing each "##" continuation onto the piece before it. A word comes back
as itself, or as the single piece [UNK] exactly when it cannot be covered by the vocabulary or is
longer than 100 characters.
"""
import pathlib
import unicodedata

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from model import tokenization

# Characters that break naive tokenizers: C0/C1 controls, zero-width and format characters,
# BOM, replacement character, lone surrogates, combining marks (alone and stacked), emoji with
# skin-tone modifiers and ZWJ sequences, regional indicators, CJK, Hangul, RTL scripts, odd
# spaces, Greek sigma, characters whose lower case expands (İ), ligatures, fullwidth forms.
TRICKY = list(
    "\x00\x01\x07\x08\x0b\x0c\x1b\x1f\x7f\x80\x85\x9f\t\n\r \u00a0\u1680\u2000\u2007\u200a"
    "\u2028\u2029\u202f\u205f\u3000\u200b\u200c\u200d\u200e\u200f\u2060\u2066\u202e\ufeff"
    "\ufffd\ufffe\ud800\udfff\ue000\U000f0000\u0378"
    "\u0300\u0301\u0302\u0308\u0323\u0345\u0360\u0489\u20dd\u3099"
    "aAzZ09éÉñßİıΣσςΑ\u01c5ﬁ\uff21\uff41\u212b\u1e9e"
    ".,!?;:'\"`~^$&*()[]{}<>/\\|_-+=@#%\u00bf\u00a1\u2014\u2026\u201c\u201d\u3002\uff0c"
    "中国語日本\u3400\U00020000\U0002a700\uf900한국어ひらがなカタカナ"
    "עבריתالعربيةहिन्दी\u0e01\u0e34"
    "\U0001f600\U0001f44d\U0001f3fd\U0001f468\U0001f469\U0001f467\U0001f1fa\U0001f1f8\u2764\ufe0f")

CHARS = st.one_of(st.sampled_from(TRICKY), st.characters(),
                  st.characters(min_codepoint=0x4E00, max_codepoint=0x9FFF))
LONG_RUN = st.builds(lambda c, n: c * n, st.sampled_from(list("a中é\u0301.\U0001f600 x")),
                     st.integers(60, 260))
TEXT = st.lists(st.one_of(st.text(CHARS, max_size=30), LONG_RUN), max_size=4).map("".join)
CASINGS = st.sampled_from([(True, None), (False, None), (True, False), (False, True)])
PROPERTY_SETTINGS = settings(max_examples=150, deadline=None, derandomize=True,
                             suppress_health_check=[HealthCheck.too_slow])

# The WordPiece vocabulary: every character of TRICKY (as a word start and as "##" continuation,
# so greedy matching never fails on them) plus a few longer pieces so words really split.
_PIECES = ["un", "##want", "##ed", "runn", "##ing", "hello", "##llo", "中国", "##ab", "aa", "##aa"]


def _char_vocab() -> list[str]:
    chars = sorted({c for c in TRICKY if not c.isspace() and unicodedata.category(c)[0] != "C"}
                   | set("abcdefghijklmnopqrstuvwxyz"))
    return list(tokenization.SPECIAL_TOKENS) + chars + ["##" + c for c in chars] + _PIECES


def _write(path: pathlib.Path, tokens) -> str:
    path.write_text("".join(t + "\n" for t in tokens), encoding="utf-8")
    return str(path)


@pytest.fixture(scope="module")
def wordpiece_vocab(tmp_path_factory) -> str:
    return _write(tmp_path_factory.mktemp("wp") / "vocab.txt", _char_vocab())


@pytest.fixture(scope="module")
def spm_model(tmp_path_factory) -> str:
    words = ("the quick brown fox jumps over lazy dog pack my box with five dozen liquor jugs "
             "sphinx of black quartz judge vow how vexingly daft zebras jump 中国 日本 한국어 "
             "émigré naïve café").split()
    sentences = [" ".join(words[(i * 7 + k * 3) % len(words)] for k in range(5 + i % 7))
                 for i in range(300)]
    prefix = str(tmp_path_factory.mktemp("spm") / "tiny")
    return tokenization.train_sentencepiece(sentences, prefix, vocab_size=64)


_TOKENIZERS: dict = {}


def wordpiece(vocab_file: str, lower: bool, strip) -> tokenization.FullTokenizer:
    key = (vocab_file, lower, strip)
    if key not in _TOKENIZERS:
        _TOKENIZERS[key] = tokenization.FullTokenizer(vocab_file, lower, strip)
    return _TOKENIZERS[key]


# -- the reference definition of "normalised" -------------------------------------------------


def _is_cjk(cp: int) -> bool:
    blocks = [(0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
              (0x2B740, 0x2B81F), (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F)]
    return any(lo <= cp <= hi for lo, hi in blocks)


def _is_punct(c: str) -> bool:
    cp = ord(c)
    return (33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126
            or unicodedata.category(c).startswith("P"))


def normalised_words(text: str, lower: bool, strip: bool) -> list[str]:
    """BERT's basic tokenization, character by character (see the module docstring)."""
    cleaned = []
    for c in text:
        cat = unicodedata.category(c)
        if c in "\t\n\r" or cat == "Zs":
            cleaned.append(" ")
        elif c in "\x00\ufffd" or cat.startswith("C"):
            continue
        elif _is_cjk(ord(c)):
            cleaned.append(f" {c} ")
        else:
            cleaned.append(c)
    words = []
    for word in "".join(cleaned).split():
        if lower:
            word = word.lower()
        if strip:
            word = "".join(c for c in unicodedata.normalize("NFD", word)
                           if unicodedata.category(c) != "Mn")
        current = ""
        for c in word:
            if _is_punct(c):
                words += [current] if current else []
                words.append(c)
                current = ""
            else:
                current += c
        words += [current] if current else []
    return words


def recombine(pieces: list[str]) -> list[str]:
    words: list[str] = []
    for piece in pieces:
        if piece.startswith("##") and words:
            words[-1] += piece[2:]
        else:
            words.append(piece)
    return words


# -- WordPiece --------------------------------------------------------------------------------


@PROPERTY_SETTINGS
@given(text=TEXT, casing=CASINGS)
def test_wordpiece_pieces_recombine_to_the_normalised_text(wordpiece_vocab, text, casing):
    lower, strip = casing
    tok = wordpiece(wordpiece_vocab, lower, strip)
    pieces = tok.tokenize(text)
    ids = tok.encode(text)
    assert all(0 <= i < tok.vocab_size for i in ids)
    assert tok.convert_ids_to_tokens(ids) == pieces
    expected = normalised_words(text, lower, lower if strip is None else strip)
    got = recombine(pieces)
    assert len(got) == len(expected), (text, pieces, expected)
    chars = {t for t in tok.vocab if not t.startswith("##") and len(t) == 1}
    for word, back in zip(expected, got):
        coverable = len(word) <= tokenization.MAX_INPUT_CHARS_PER_WORD and set(word) <= chars
        assert back == (word if coverable else tokenization.UNK_TOKEN), (text, word, back)
    if all(w == b for w, b in zip(expected, got)):
        assert " ".join(got) == " ".join(expected)


@PROPERTY_SETTINGS
@given(text=TEXT, casing=CASINGS)
def test_wordpiece_on_a_small_vocab_never_crashes_and_gives_vocab_ids(tmp_path_factory, text,
                                                                       casing):
    # A vocabulary that covers almost nothing: most words become [UNK], nothing else may happen.
    key = ("small",) + casing
    if key not in _TOKENIZERS:
        path = _write(tmp_path_factory.mktemp("small") / "vocab.txt",
                      list(tokenization.SPECIAL_TOKENS) + ["a", "##b", "the", ".", "中"])
        _TOKENIZERS[key] = tokenization.FullTokenizer(path, *casing)
    tok = _TOKENIZERS[key]
    ids = tok.encode(text.encode("utf-8", "surrogatepass"))  # bytes too, invalid ones dropped
    assert all(0 <= i < tok.vocab_size for i in ids)
    words = normalised_words(text.encode("utf-8", "surrogatepass").decode("utf-8", "ignore"),
                             casing[0], casing[0] if casing[1] is None else casing[1])
    assert len(recombine(tok.convert_ids_to_tokens(ids))) == len(words)


# -- SentencePiece ----------------------------------------------------------------------------


@PROPERTY_SETTINGS
@given(text=TEXT, lower=st.booleans())
def test_sentencepiece_never_crashes_and_never_emits_special_ids(spm_model, text, lower):
    key = (spm_model, lower)
    if key not in _TOKENIZERS:
        _TOKENIZERS[key] = tokenization.SentencePieceTokenizer(spm_model, do_lower_case=lower)
    tok = _TOKENIZERS[key]
    # Lone surrogates are not Unicode scalar values and cannot be UTF-8 encoded: text read from a
    # file never holds them, so they are left out here.
    text = "".join(c for c in text if unicodedata.category(c) != "Cs")
    pieces = tok.tokenize(text)
    ids = tok.encode(text)
    assert len(pieces) == len(ids)
    assert all(0 <= i < tok.vocab_size for i in ids)
    assert tok.convert_tokens_to_ids(pieces) == ids
    # Raw text never turns into [PAD] [CLS] [SEP] [MASK] (unknown characters become [UNK]).
    assert not {tok.pad_id, tok.cls_id, tok.sep_id, tok.mask_id} & set(ids)
    # Every id maps back to a piece, and a text without unknown characters decodes back to its
    # SentencePiece-normalised (NFKC, whitespace-collapsed) form.
    assert len(tok.convert_ids_to_tokens(ids)) == len(ids)
    if tok.unk_id not in ids:
        source = text.lower() if lower else text
        def spaced(s):  # SentencePiece writes spaces as U+2581 and adds one in front
            return s.replace("\u2581", " ").strip(" ")

        assert spaced(tok.sp.DecodeIds(ids)) == spaced(tok.sp.Normalize(source))
