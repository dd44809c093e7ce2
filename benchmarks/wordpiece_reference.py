"""Plain pure-Python BERT WordPiece: the straightforward algorithm, kept as a baseline.

This is deliberately the slow, obvious formulation of BERT's tokenizer (a Python loop over every
character for cleaning, CJK spacing, accent stripping and punctuation splitting; WordPiece trying
the longest substring first from the full word length). It serves two purposes:
  - tests/test_tokenization.py checks that model/tokenization.py gives identical output;
  - benchmarks/data_throughput.py measures how much faster the project's tokenizer is.
It reuses only the character-class predicates of model/tokenization.py, which are one-line
transcriptions of BERT's definitions.
"""
import os
import sys
import unicodedata

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from model import tokenization  # noqa: E402  (after the path set-up above)


class ReferenceWordpiece:
    """End-to-end BERT tokenization without caches or fast paths."""

    def __init__(self, vocab_file: str, do_lower_case: bool = True,
                 strip_accents: bool | None = None, max_input_chars_per_word: int = 100):
        self.vocab = tokenization.load_vocab(vocab_file)
        self.do_lower_case = do_lower_case
        self.strip_accents = do_lower_case if strip_accents is None else strip_accents
        self.max_input_chars_per_word = max_input_chars_per_word
        self.unk_token = "[UNK]"

    # Basic tokenization, one character at a time.
    def _clean(self, text: str) -> str:
        out = []
        for char in text:
            cp = ord(char)
            if cp == 0 or cp == 0xFFFD or tokenization.is_control(char):
                continue
            out.append(" " if tokenization.is_whitespace(char) else char)
        return "".join(out)

    def _space_cjk(self, text: str) -> str:
        out = []
        for char in text:
            if tokenization.is_cjk_char(ord(char)):
                out.extend((" ", char, " "))
            else:
                out.append(char)
        return "".join(out)

    def _strip_accents(self, word: str) -> str:
        out = []
        for char in unicodedata.normalize("NFD", word):
            if unicodedata.category(char) != "Mn":
                out.append(char)
        return "".join(out)

    def _split_punctuation(self, word: str) -> list[str]:
        groups: list[list[str]] = []
        new_group = True
        for char in word:
            if tokenization.is_punctuation(char):
                groups.append([char])
                new_group = True
            else:
                if new_group:
                    groups.append([])
                new_group = False
                groups[-1].append(char)
        return ["".join(g) for g in groups]

    def basic_tokenize(self, text: str) -> list[str]:
        text = self._space_cjk(self._clean(text))
        pieces = []
        for word in text.strip().split():
            if self.do_lower_case:
                word = word.lower()
            if self.strip_accents:
                word = self._strip_accents(word)
            pieces.extend(self._split_punctuation(word))
        return " ".join(pieces).strip().split()

    # WordPiece, longest match first from the full remaining length.
    def wordpiece(self, word: str) -> list[str]:
        chars = list(word)
        if len(chars) > self.max_input_chars_per_word:
            return [self.unk_token]
        pieces = []
        start = 0
        while start < len(chars):
            end = len(chars)
            found = None
            while start < end:
                candidate = "".join(chars[start:end])
                if start > 0:
                    candidate = "##" + candidate
                if candidate in self.vocab:
                    found = candidate
                    break
                end -= 1
            if found is None:
                return [self.unk_token]
            pieces.append(found)
            start = end
        return pieces

    def tokenize(self, text: str) -> list[str]:
        out = []
        for word in self.basic_tokenize(text):
            out.extend(self.wordpiece(word))
        return out

    def encode(self, text: str) -> list[int]:
        return [self.vocab[t] for t in self.tokenize(text)]
