"""Tokenizers: BERT's WordPiece (fast, behaviour-identical) and SentencePiece, one interface.

Both tokenizers expose the same surface, which the rest of the project codes against:

    tokenizer.tokenize(text) -> list[str]
    tokenizer.encode(text) -> list[int]
    tokenizer.convert_tokens_to_ids(tokens) / convert_ids_to_tokens(ids)
    tokenizer.vocab (token -> id), tokenizer.inv_vocab (id -> token), tokenizer.vocab_size
    tokenizer.pad_id, unk_id, cls_id, sep_id, mask_id

WordPiece follows BERT's algorithm exactly (clean text, CJK characters as words, lower-casing,
accent stripping, punctuation splitting, greedy longest-match-first with "##" continuations).
It is fast because no step loops over characters in Python:
  - cleaning and CJK spacing are one `str.translate` with a lazily filled table;
  - lower-casing and NFD run on the whole text. BERT applies them word by word, which gives
    the same result: both are per-character except Greek final sigma, whose context never
    crosses whitespace, and NFD reordering, which never crosses a space;
  - deleting combining marks and spacing out punctuation is a second `str.translate`, then
    `str.split()`; pure-ASCII text (most English lines) uses one regex `findall` instead;
  - WordPiece results are memoised per word (natural text is Zipfian: almost all hits).
benchmarks/wordpiece_reference.py keeps the plain algorithm; tests check both give identical
output on real and on generated text.
"""
import abc
import functools
import itertools
import os
import re
import unicodedata
from typing import Iterable

from util import fs

PAD_TOKEN = "[PAD]"
UNK_TOKEN = "[UNK]"
CLS_TOKEN = "[CLS]"
SEP_TOKEN = "[SEP]"
MASK_TOKEN = "[MASK]"
SPECIAL_TOKENS = (PAD_TOKEN, UNK_TOKEN, CLS_TOKEN, SEP_TOKEN, MASK_TOKEN)

# BERT maps words longer than this (in characters, after basic tokenization) to [UNK].
MAX_INPUT_CHARS_PER_WORD = 100
# Distinct words remembered per tokenizer (each entry ~0.3 KB); covers the head of any corpus.
WORD_CACHE_SIZE = 1 << 19


# ---------------------------------------------------------------------------------------------
# Character classes, with BERT's definitions.


def is_whitespace(char: str) -> bool:
    """Space, tab, newline, carriage return, or any Unicode space separator (Zs)."""
    # \t, \n and \r are control characters to Unicode, but BERT treats them as whitespace.
    if char in " \t\n\r":
        return True
    return unicodedata.category(char) == "Zs"


def is_control(char: str) -> bool:
    """Any Unicode "C*" category character except tab, newline and carriage return."""
    if char in "\t\n\r":
        return False
    return unicodedata.category(char).startswith("C")


def is_punctuation(char: str) -> bool:
    """Unicode "P*" characters, plus every non-alphanumeric printable ASCII character."""
    cp = ord(char)
    # BERT counts ASCII symbols such as "$", "^", "`", "+" as punctuation too, although
    # Unicode puts them in the symbol categories.
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(char).startswith("P")


def is_cjk_char(cp: int) -> bool:
    """CJK Unified Ideographs blocks (not Hangul, Hiragana or Katakana, which use spaces)."""
    return (0x4E00 <= cp <= 0x9FFF or 0x3400 <= cp <= 0x4DBF or 0x20000 <= cp <= 0x2A6DF
            or 0x2A700 <= cp <= 0x2B73F or 0x2B740 <= cp <= 0x2B81F or 0x2B820 <= cp <= 0x2CEAF
            or 0xF900 <= cp <= 0xFAFF or 0x2F800 <= cp <= 0x2FA1F)


class _CleaningTable(dict):
    """`str.translate` table for BERT's cleaning and CJK spacing, filled on first sight of a char.

    Both steps map each character independently (drop NUL, U+FFFD and control characters; turn
    whitespace into " "; surround CJK ideographs with spaces), so one translate pass does both.
    """

    def __missing__(self, cp: int) -> str | None:
        char = chr(cp)
        if cp == 0 or cp == 0xFFFD or is_control(char):
            value = None
        elif is_whitespace(char):
            value = " "
        elif is_cjk_char(cp):
            value = f" {char} "
        else:
            value = char
        self[cp] = value
        return value


_CLEANING_TABLE = _CleaningTable()
# Pre-fill ASCII so that pure-ASCII text takes CPython's fast ASCII translate path at once.
for _cp in range(128):
    _CLEANING_TABLE[_cp]  # pylint: disable=pointless-statement

# After cleaning, ASCII text holds only spaces and printable characters: a word is a run of
# letters/digits, and every other printable character is punctuation to BERT.
_ASCII_WORDS = re.compile(r"[A-Za-z0-9]+|[!-/:-@\[-`{-~]")


class _SplitTable(dict):
    """`str.translate` table that spaces out punctuation (and optionally deletes combining marks).

    Applied to lower-cased, NFD-normalised text, then str.split(): the same words as BERT's
    per-word accent stripping and punctuation splitting (marks are never punctuation, so one
    pass can do both).
    """

    def __init__(self, delete_marks: bool):
        super().__init__()
        self._delete_marks = delete_marks

    def __missing__(self, cp: int) -> str | None:
        char = chr(cp)
        if self._delete_marks and unicodedata.category(char) == "Mn":
            value = None
        elif is_punctuation(char):
            value = f" {char} "
        else:
            value = char
        self[cp] = value
        return value


_SPLIT_TABLE = _SplitTable(delete_marks=False)
_STRIP_AND_SPLIT_TABLE = _SplitTable(delete_marks=True)


# ---------------------------------------------------------------------------------------------
# Text helpers kept for code written against BERT's tokenization module.


def convert_to_unicode(text: str | bytes) -> str:
    """Returns `text` as str; bytes are decoded as UTF-8, dropping invalid bytes (as BERT does)."""
    if isinstance(text, str):
        return text
    if isinstance(text, bytes):
        return text.decode("utf-8", "ignore")
    raise TypeError(f"expected str or bytes, got {type(text).__name__}")


def printable_text(text: str | bytes) -> str:
    """Text suitable for print() / logging."""
    return convert_to_unicode(text)


def whitespace_tokenize(text: str) -> list[str]:
    """Splits on runs of whitespace (Python's definition), dropping empty pieces."""
    return text.split()


def strip_accents_from(text: str) -> str:
    """NFD-decomposes `text` and drops the combining marks (category Mn)."""
    if text.isascii():
        return text  # ASCII has no decompositions
    return "".join(c for c in unicodedata.normalize("NFD", text)
                   if unicodedata.category(c) != "Mn")


# ---------------------------------------------------------------------------------------------
# Vocabulary.


# Names a model directory gives its vocabulary: WordPiece, or a SentencePiece model.
VOCAB_FILE_NAMES = ("vocab.txt", "spm.model")


def is_sentencepiece_model(path: str) -> bool:
    """A vocabulary path ending in .model is a SentencePiece model; anything else a vocab.txt."""
    return path.endswith(".model")


def find_vocab_file(directory: str) -> str | None:
    """The vocabulary a model or data directory holds (vocab.txt or spm.model), if any."""
    for name in VOCAB_FILE_NAMES:
        path = os.path.join(directory, name)
        if fs.isfile(path):
            return path
    return None


def load_vocab(vocab_file: str) -> dict[str, int]:
    """Reads a BERT vocab.txt (one token per line, id = line number - 1) into an ordered dict.

    A SentencePiece `.model` path gives its pieces in id order instead.

    Raises:
      ValueError: missing file, a line that is not UTF-8, or a token listed twice (each names
        the file and line).
    """
    if not fs.isfile(vocab_file):
        raise ValueError(f"vocabulary file {vocab_file} {fs.not_a_file(vocab_file)}")
    if is_sentencepiece_model(vocab_file):
        return dict(SentencePieceTokenizer(vocab_file).vocab)
    data = fs.read_bytes(vocab_file)
    wrong_kind = _sentencepiece_file_kind(data)
    if wrong_kind:
        # Read as lines it used to fail as "token listed twice" or "missing [MASK]".
        raise ValueError(f"{vocab_file} is {wrong_kind}, not a WordPiece vocab.txt (one token per "
                         "line); pass the SentencePiece model under a name ending in .model "
                         "(e.g. spm.model), which is read as SentencePiece")
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()  # the newline that ends the last line does not start a token
    vocab: dict[str, int] = {}
    for index, raw in enumerate(lines):
        try:
            token = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ValueError(
                f"{vocab_file}:{index + 1}: vocabulary line is not valid UTF-8 "
                f"(byte {e.start} of the line: {raw[e.start:e.start + 1]!r})") from None
        if index == 0:
            token = token.lstrip("\ufeff")
        token = token.strip()  # BERT strips each line, so "\r\n" files load the same
        if token in vocab:
            raise ValueError(
                f"{vocab_file}:{index + 1}: token {token!r} is listed twice "
                f"(first on line {vocab[token] + 1})")
        vocab[token] = index
    if not vocab:
        raise ValueError(f"vocabulary file {vocab_file} is empty")
    return vocab


def _sentencepiece_file_kind(data: bytes) -> str | None:
    """"a SentencePiece model" (binary protobuf) or "a SentencePiece .vocab listing" (piece TAB
    score lines) when `data` is one of those, else None."""
    head = data[:4096]
    if any(b < 9 or 13 < b < 32 for b in head):  # control bytes: no text vocabulary has them
        import sentencepiece as spm
        try:
            spm.SentencePieceProcessor(model_proto=data)
            return "a SentencePiece model"
        except (RuntimeError, OSError, TypeError, ValueError):
            return None
    lines = head.split(b"\n")[:20]
    if len(lines) > 1 and all(re.fullmatch(rb"[^\t]+\t-?[0-9.e+-]+\r?", l) for l in lines[:-1]):
        return "a SentencePiece .vocab listing (piece and score per line)"
    return None


def _special_ids(vocab: dict[str, int], source: str) -> tuple[int, int, int, int, int]:
    missing = [t for t in SPECIAL_TOKENS if t not in vocab]
    if missing:
        raise ValueError(
            f"vocabulary {source} is missing the special token(s) {' '.join(missing)}; "
            f"ELECTRA needs all of {' '.join(SPECIAL_TOKENS)}")
    return tuple(vocab[t] for t in SPECIAL_TOKENS)  # type: ignore[return-value]


class _TokenizerBase(abc.ABC):
    """Shared id conversion and special-token attributes."""

    vocab: dict[str, int]
    inv_vocab: dict[int, str]
    _source: str

    def _init_special_ids(self) -> None:
        (self.pad_id, self.unk_id, self.cls_id, self.sep_id,
         self.mask_id) = _special_ids(self.vocab, self._source)

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    @property
    def special_ids(self) -> dict[str, int]:
        """Token -> id for [PAD] [UNK] [CLS] [SEP] [MASK]."""
        return {t: self.vocab[t] for t in SPECIAL_TOKENS}

    def convert_tokens_to_ids(self, tokens: Iterable[str]) -> list[int]:
        vocab = self.vocab
        try:
            return [vocab[t] for t in tokens]
        except KeyError as e:
            raise ValueError(f"token {e.args[0]!r} is not in the vocabulary {self._source}") from None

    def convert_ids_to_tokens(self, ids: Iterable[int]) -> list[str]:
        inv = self.inv_vocab
        try:
            return [inv[int(i)] for i in ids]
        except KeyError as e:
            raise ValueError(
                f"id {e.args[0]} is outside the vocabulary {self._source} "
                f"(size {self.vocab_size})") from None

    @abc.abstractmethod
    def tokenize(self, text: str) -> list[str]:
        """Text -> vocabulary pieces."""

    def encode(self, text: str) -> list[int]:
        return self.convert_tokens_to_ids(self.tokenize(text))


# ---------------------------------------------------------------------------------------------
# WordPiece.


class BasicTokenizer:
    """BERT's basic tokenization: cleaning, CJK spacing, lower-casing, accents, punctuation.

    Args:
      do_lower_case: lower-case the text.
      strip_accents: drop combining accents after NFD decomposition. None follows
        `do_lower_case` (BERT's behaviour, and Hugging Face's convention); True/False force it
        on or off independently of casing.
    """

    def __init__(self, do_lower_case: bool = True, strip_accents: bool | None = None):
        self.do_lower_case = do_lower_case
        self.strip_accents = do_lower_case if strip_accents is None else bool(strip_accents)

    def tokenize(self, text: str) -> list[str]:
        """text -> words and punctuation marks, e.g. "Héllo, World!" -> hello , world !"""
        text = convert_to_unicode(text).translate(_CLEANING_TABLE)
        if self.do_lower_case:
            text = text.lower()
        if text.isascii():  # ~85% of English lines: no accents, ASCII-only punctuation
            return _ASCII_WORDS.findall(text)
        if self.strip_accents:
            return unicodedata.normalize("NFD", text).translate(_STRIP_AND_SPLIT_TABLE).split()
        return text.translate(_SPLIT_TABLE).split()


class WordpieceTokenizer:
    """Greedy longest-match-first WordPiece over a vocab; non-initial pieces carry "##".

    "unaffable" -> ["un", "##aff", "##able"]; a word that cannot be covered, or is longer than
    `max_input_chars_per_word` characters, becomes the unknown token.
    """

    def __init__(self, vocab: dict[str, int], unk_token: str = UNK_TOKEN,
                 max_input_chars_per_word: int = MAX_INPUT_CHARS_PER_WORD):
        self.vocab = vocab
        self.unk_token = unk_token
        self.max_input_chars_per_word = max_input_chars_per_word
        # Longest entry bounds the first substring tried, instead of the whole word.
        self._max_piece_len = max((len(t) for t in vocab), default=1)

    def tokenize_word(self, word: str) -> tuple[str, ...]:
        """One basic-tokenized word -> its pieces."""
        n = len(word)
        if n > self.max_input_chars_per_word:
            return (self.unk_token,)
        vocab = self.vocab
        if word in vocab:  # the common case: a whole word in the vocabulary
            return (word,)
        pieces = []
        start = 0
        while start < n:
            prefix = "##" if start > 0 else ""
            end = min(n, start + self._max_piece_len)
            while end > start:
                piece = prefix + word[start:end]
                if piece in vocab:
                    break
                end -= 1
            else:
                return (self.unk_token,)
            pieces.append(piece)
            start = end
        return tuple(pieces)

    def tokenize(self, text: str) -> list[str]:
        """Whitespace-separated, already basic-tokenized text -> word pieces."""
        out: list[str] = []
        for word in text.split():
            out.extend(self.tokenize_word(word))
        return out


class FullTokenizer(_TokenizerBase):
    """BERT/ELECTRA WordPiece tokenizer reading a vocab.txt.

    Args:
      vocab_file: one token per line; must contain [PAD] [UNK] [CLS] [SEP] [MASK].
      do_lower_case: True for uncased vocabularies (the released ELECTRA models).
      strip_accents: None follows do_lower_case; True/False force it.
    """

    kind = "wordpiece"

    def __init__(self, vocab_file: str, do_lower_case: bool = True,
                 strip_accents: bool | None = None):
        self._source = vocab_file
        self.vocab_file = vocab_file
        self.vocab = load_vocab(vocab_file)
        self.inv_vocab = {i: t for t, i in self.vocab.items()}
        self._init_special_ids()
        self.do_lower_case = do_lower_case
        self.basic_tokenizer = BasicTokenizer(do_lower_case, strip_accents)
        self.strip_accents = self.basic_tokenizer.strip_accents
        self.wordpiece_tokenizer = WordpieceTokenizer(self.vocab, unk_token=UNK_TOKEN)
        self._tokens_cache = functools.lru_cache(maxsize=WORD_CACHE_SIZE)(
            self.wordpiece_tokenizer.tokenize_word)
        self._ids_cache = functools.lru_cache(maxsize=WORD_CACHE_SIZE)(self._word_ids)

    def _word_ids(self, word: str) -> tuple[int, ...]:
        vocab = self.vocab
        return tuple(vocab[t] for t in self.wordpiece_tokenizer.tokenize_word(word))

    def tokenize(self, text: str) -> list[str]:
        """text -> word pieces, e.g. "Unwanted running" -> un ##want ##ed runn ##ing"""
        words = self.basic_tokenizer.tokenize(text)
        return list(itertools.chain.from_iterable(map(self._tokens_cache, words)))

    def encode(self, text: str) -> list[int]:
        """text -> word-piece ids (no [CLS]/[SEP] added)."""
        words = self.basic_tokenizer.tokenize(text)
        return list(itertools.chain.from_iterable(map(self._ids_cache, words)))


# ---------------------------------------------------------------------------------------------
# SentencePiece.


class SentencePieceTokenizer(_TokenizerBase):
    """A SentencePiece model behind the same interface as FullTokenizer.

    The model must contain the pieces [PAD] [UNK] [CLS] [SEP] [MASK] (train_sentencepiece()
    puts them at ids 0-4). Pieces are the model's own ("▁the", "re", ...), without "##".

    Args:
      model_file: path of a SentencePiece .model file.
      do_lower_case: lower-case text before encoding (for models trained on lower-cased text).
    """

    kind = "sentencepiece"

    def __init__(self, model_file: str, do_lower_case: bool = False):
        import sentencepiece as spm  # imported here so WordPiece users never need it

        if not fs.isfile(model_file):
            raise ValueError(f"SentencePiece model {model_file} {fs.not_a_file(model_file)}")
        self._source = model_file
        self.model_file = model_file
        self.do_lower_case = do_lower_case
        self.strip_accents = False
        self.sp = spm.SentencePieceProcessor()
        try:
            # From bytes: SentencePiece's own loader opens local files only.
            self.sp.LoadFromSerializedProto(fs.read_bytes(model_file))
        except (OSError, RuntimeError) as e:
            raise ValueError(f"{model_file} is not a SentencePiece model: {e}") from None
        self.vocab = {self.sp.IdToPiece(i): i for i in range(self.sp.GetPieceSize())}
        self.inv_vocab = {i: t for t, i in self.vocab.items()}
        self._init_special_ids()

    def tokenize(self, text: str) -> list[str]:
        text = convert_to_unicode(text)
        if self.do_lower_case:
            text = text.lower()
        return self.sp.EncodeAsPieces(text)

    def encode(self, text: str) -> list[int]:
        text = convert_to_unicode(text)
        if self.do_lower_case:
            text = text.lower()
        return self.sp.EncodeAsIds(text)

    def convert_tokens_to_ids(self, tokens: Iterable[str]) -> list[int]:
        # Pieces for characters outside the model (which SentencePiece passes through) are [UNK].
        vocab, unk = self.vocab, self.unk_id
        return [vocab.get(t, unk) for t in tokens]


def train_sentencepiece(sentences: Iterable[str], model_prefix: str, vocab_size: int,
                        *, do_lower_case: bool = False, max_sentences: int = 2_000_000, model_type: str = "unigram") -> str:
    """Trains a SentencePiece model with [PAD] [UNK] [CLS] [SEP] [MASK] at ids 0..4.

    Args:
      sentences: training text, one sentence/paragraph per item (blank items are skipped).
      model_prefix: writes `<prefix>.model` and `<prefix>.vocab`.
      vocab_size: number of pieces including the five special tokens.
      do_lower_case: lower-case the training text (pair with SentencePieceTokenizer(..., True)).
      max_sentences: at most this many sentences are read.

    Returns:
      The path of the .model file.

    Raises:
      ValueError: the vocabulary size does not fit the text, or there is no text.
    """
    import sentencepiece as spm

    def _lines():
        for line in itertools.islice((s.strip() for s in sentences if s.strip()), max_sentences):
            yield line.lower() if do_lower_case else line

    try:
        spm.SentencePieceTrainer.Train(
            sentence_iterator=_lines(), model_prefix=model_prefix, vocab_size=vocab_size,
            model_type=model_type, character_coverage=0.9999,
            pad_id=0, unk_id=1, bos_id=-1, eos_id=-1,
            pad_piece=PAD_TOKEN, unk_piece=UNK_TOKEN,
            # Control symbols are never produced from raw text, so a literal "[SEP]" in the
            # corpus cannot turn into a separator.
            control_symbols=[CLS_TOKEN, SEP_TOKEN, MASK_TOKEN],
            shuffle_input_sentence=False, num_threads=1, minloglevel=2)
    except RuntimeError as e:
        raise ValueError(f"SentencePiece training with vocab_size={vocab_size} failed: {e}") from None
    return model_prefix + ".model"


def build_tokenizer(vocab_file: str | None = None, spm_model: str | None = None,
                    do_lower_case: bool = True, strip_accents: bool | None = None
                    ) -> FullTokenizer | SentencePieceTokenizer:
    """WordPiece from `vocab_file` or SentencePiece from `spm_model` (exactly one).

    A `vocab_file` ending in .model is taken as a SentencePiece model.
    """
    if vocab_file is not None and spm_model is None and is_sentencepiece_model(vocab_file):
        vocab_file, spm_model = None, vocab_file
        strip_accents = None if not strip_accents else strip_accents
    if (vocab_file is None) == (spm_model is None):
        raise ValueError("give exactly one of vocab_file (WordPiece) and spm_model (SentencePiece)")
    if spm_model is not None:
        if strip_accents:
            raise ValueError("strip_accents applies to WordPiece vocabularies only, "
                             f"not to the SentencePiece model {spm_model}")
        return SentencePieceTokenizer(spm_model, do_lower_case=do_lower_case)
    return FullTokenizer(vocab_file, do_lower_case=do_lower_case, strip_accents=strip_accents)
