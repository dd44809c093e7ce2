"""QA features: a question and its context -> fixed-length windows `[CLS] question [SEP] doc [SEP]`.

As BERT/ELECTRA:
  - the question is cut to `max_query_length` word pieces;
  - the context's words are split into word pieces, remembering which word each piece came
    from (`tok_to_orig`) and where each word starts (`orig_to_tok`);
  - a context longer than one window is covered by windows of up to
    `max_seq_length - len(question) - 3` pieces, each starting `doc_stride` pieces after the
    previous one, until one reaches the end;
  - a piece seen by several windows is scored ("max context") only in the window where it has
    the most context on its least-context side, so each answer start is predicted once;
  - a training answer (start/end words) becomes piece positions in each window, tightened to the
    pieces of the answer text when the word holds more ("(1895-1943)." -> "1895"); a window that
    does not hold the whole answer, and every window of an unanswerable question, points at
    [CLS] (position 0).
"""
import dataclasses
from typing import Sequence

from finetune.qa import qa_data

CLS, SEP = "[CLS]", "[SEP]"


@dataclasses.dataclass
class TokenizedDoc:
    """A context's word pieces and their alignment with its whitespace words."""
    tokens: list[str]
    tok_to_orig: list[int]  # piece -> word
    orig_to_tok: list[int]  # word -> its first piece (the next word's when it has none)


@dataclasses.dataclass
class Window:
    """One model input covering `length` pieces of the document from `doc_start`.

    tokens: [CLS] question [SEP] pieces [SEP] (unpadded).
    token_to_orig_map: window position -> context word, for document positions.
    token_is_max_context: window position -> whether this window is the one that scores it.
    start_position / end_position: training answer positions in the window (0 = [CLS]).
    """
    index: int
    doc_start: int
    length: int
    tokens: list[str]
    segment_ids: list[int]
    token_to_orig_map: dict[int, int]
    token_is_max_context: dict[int, bool]
    start_position: int = 0
    end_position: int = 0

    @property
    def doc_offset(self) -> int:
        """Position of the first document piece ([CLS] + question + [SEP] come before)."""
        return len(self.tokens) - self.length - 1


def tokenize_doc(words: Sequence[str], tokenizer) -> TokenizedDoc:
    tokens: list[str] = []
    tok_to_orig: list[int] = []
    orig_to_tok: list[int] = []
    for i, word in enumerate(words):
        orig_to_tok.append(len(tokens))
        pieces = tokenizer.tokenize(word)
        tokens.extend(pieces)
        tok_to_orig.extend([i] * len(pieces))
    return TokenizedDoc(tokens, tok_to_orig, orig_to_tok)


def improve_answer_span(doc_tokens: Sequence[str], start: int, end: int, tokenizer,
                        answer_text: str) -> tuple[int, int]:
    """The narrowest sub-span of pieces [start, end] that spells the answer's own pieces.

    Word-level offsets can include neighbouring characters ("(1895-1943)." for "1895"); the
    answer's pieces often sit inside the word's. Returns (start, end) unchanged when they do not
    (e.g. "Japan" annotated inside "Japanese", one piece).
    """
    target = " ".join(tokenizer.tokenize(answer_text))
    for new_start in range(start, end + 1):
        for new_end in range(end, new_start - 1, -1):
            if " ".join(doc_tokens[new_start:new_end + 1]) == target:
                return new_start, new_end
    return start, end


def doc_spans(n_tokens: int, max_tokens: int, stride: int) -> list[tuple[int, int]]:
    """(start, length) windows over n_tokens pieces; the last one reaches the end."""
    spans = []
    start = 0
    while start < n_tokens:
        length = min(n_tokens - start, max_tokens)
        spans.append((start, length))
        if start + length == n_tokens:
            break
        start += min(length, stride)
    return spans


def max_context_spans(spans: Sequence[tuple[int, int]], n_tokens: int) -> list[int]:
    """For every piece, the window that scores it: the one maximising
    min(left context, right context) + 0.01 * window length (first window on ties)."""
    best_score = [float("-inf")] * n_tokens
    best_span = [-1] * n_tokens
    for index, (start, length) in enumerate(spans):
        end = start + length - 1
        for position in range(start, end + 1):
            score = min(position - start, end - position) + 0.01 * length
            if score > best_score[position]:
                best_score[position] = score
                best_span[position] = index
    return best_span


def answer_token_span(example: qa_data.QAExample, doc: TokenizedDoc,
                      tokenizer) -> tuple[int, int] | None:
    """Piece positions (start, end) of a training answer in the whole document; None when the
    answer covers no piece (e.g. a word the tokenizer deletes entirely)."""
    start = doc.orig_to_tok[example.start_position]
    if example.end_position < len(example.doc_tokens) - 1:
        end = doc.orig_to_tok[example.end_position + 1] - 1
    else:
        end = len(doc.tokens) - 1
    if end < start:
        return None
    return improve_answer_span(doc.tokens, start, end, tokenizer, example.orig_answer_text)


def make_windows(example: qa_data.QAExample, tokenizer, max_seq_length: int,
                 max_query_length: int, doc_stride: int, is_training: bool,
                 doc: TokenizedDoc | None = None) -> list[Window]:
    """The windows of one example (labelled when is_training); see the module docstring.

    Raises:
      ValueError: the question leaves no room for the document in max_seq_length.
    """
    query = tokenizer.tokenize(example.question_text)[:max_query_length]
    max_tokens_for_doc = max_seq_length - len(query) - 3  # [CLS], [SEP], [SEP]
    if max_tokens_for_doc <= 0:
        raise ValueError(f"max_seq_length {max_seq_length} leaves no room for the document "
                         f"after a {len(query)}-piece question (max_query_length "
                         f"{max_query_length}); raise max_seq_length or lower max_query_length")
    doc = doc if doc is not None else tokenize_doc(example.doc_tokens, tokenizer)
    answer = None
    if is_training and not example.is_impossible:
        answer = answer_token_span(example, doc, tokenizer)
        if answer is None:
            return []
    spans = doc_spans(len(doc.tokens), max_tokens_for_doc, doc_stride)
    scorer_of = max_context_spans(spans, len(doc.tokens))
    windows = []
    for index, (start, length) in enumerate(spans):
        tokens = [CLS] + query + [SEP]
        segment_ids = [0] * len(tokens)
        token_to_orig_map, token_is_max_context = {}, {}
        for piece in range(start, start + length):
            token_to_orig_map[len(tokens)] = doc.tok_to_orig[piece]
            token_is_max_context[len(tokens)] = scorer_of[piece] == index
            tokens.append(doc.tokens[piece])
        tokens.append(SEP)
        segment_ids += [1] * (length + 1)
        window = Window(index, start, length, tokens, segment_ids, token_to_orig_map,
                        token_is_max_context)
        if answer is not None and start <= answer[0] and answer[1] <= start + length - 1:
            window.start_position = answer[0] - start + window.doc_offset
            window.end_position = answer[1] - start + window.doc_offset
        windows.append(window)
    return windows


def window_input_ids(window: Window, tokenizer, max_seq_length: int) -> dict[str, list[int]]:
    """input_ids / input_mask / segment_ids of a window, zero-padded to max_seq_length."""
    pieces = window.tokens[1:window.doc_offset - 1] + window.tokens[window.doc_offset:-1]
    query_len = window.doc_offset - 2
    ids = tokenizer.convert_tokens_to_ids(pieces)
    input_ids = ([tokenizer.cls_id] + ids[:query_len] + [tokenizer.sep_id] + ids[query_len:]
                 + [tokenizer.sep_id])
    padding = max_seq_length - len(input_ids)
    return {
        "input_ids": input_ids + [tokenizer.pad_id] * padding,
        "input_mask": [1] * len(input_ids) + [0] * padding,
        "segment_ids": window.segment_ids + [0] * padding,
    }
