"""Chunk-level evaluation as the CoNLL-2000 `conlleval` script defines it, plus tag conversions.

conlleval reads, per token, a gold and a guessed tag "<prefix>-<type>" ("B-NP", "I-VP", "O";
the prefix is everything before the first hyphen, so types may contain hyphens). Two tests decide
where chunks begin and end between consecutive tokens (`start_of_chunk`, `end_of_chunk`); they
accept IOB1, IOB2, IOE1/2 and the bracket notations. Notably:
  - "I-X" after "O" (or after a chunk of another type) starts a chunk;
  - a change of type always ends the previous chunk and starts a new one;
  - "B-X" after "I-X" ends the chunk and starts another of the same type.
A sentence break counts as an "O" token, so no chunk spans two sentences. A guessed chunk is
correct when it starts and ends on the same tokens as a gold chunk of the same type. Precision =
correct / guessed, recall = correct / gold, F1 their harmonic mean (0 when undefined), per type
and overall, on a 0-100 scale; token accuracy counts tokens whose two tags are equal as strings.

Models are trained on BIOES tags (as the official release); `bioes_to_iob2` turns a predicted
sequence, even an ill-formed one, back into IOB2: the scheme every gold file is read in
(tag_schemes.py converts IOB1 and BIOES files), so tags compare as strings for token accuracy.
"""
import collections
import dataclasses
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from finetune import health, scorer

OUTSIDE = "O"


def split_tag(tag: str) -> tuple[str, str]:
    """"B-NP" -> ("B", "NP"), "B-PP-X" -> ("B", "PP-X"), "O" -> ("O", "")."""
    prefix, _, chunk_type = tag.partition("-")
    return prefix, chunk_type


def end_of_chunk(prev_tag: str, tag: str, prev_type: str, chunk_type: str) -> bool:
    """Did a chunk end between the previous token and this one (conlleval's rules)?"""
    if (prev_tag, tag) in {("B", "B"), ("B", "O"), ("I", "B"), ("I", "O"),
                           ("E", "E"), ("E", "I"), ("E", "O")}:
        return True
    if prev_tag not in ("O", ".") and prev_type != chunk_type:
        return True
    return prev_tag in ("[", "]")  # bracket chunks have length one


def start_of_chunk(prev_tag: str, tag: str, prev_type: str, chunk_type: str) -> bool:
    """Did a chunk start between the previous token and this one (conlleval's rules)?"""
    if (prev_tag, tag) in {("B", "B"), ("I", "B"), ("O", "B"), ("O", "I"),
                           ("E", "E"), ("E", "I"), ("O", "E")}:
        return True
    if tag not in ("O", ".") and prev_type != chunk_type:
        return True
    return tag in ("[", "]")


def get_chunks(tags: Sequence[str]) -> list[tuple[int, int, str]]:
    """The chunks of one sentence as (first token, last token, type), by conlleval's rules."""
    chunks = []
    prev_tag, prev_type = OUTSIDE, ""
    start = None
    # A trailing "O" closes the last chunk, as conlleval's sentence break does.
    for i, full_tag in enumerate(list(tags) + [OUTSIDE]):
        tag, chunk_type = split_tag(full_tag)
        if start is not None and end_of_chunk(prev_tag, tag, prev_type, chunk_type):
            chunks.append((start, i - 1, prev_type))
            start = None
        if i < len(tags) and start_of_chunk(prev_tag, tag, prev_type, chunk_type):
            start = i
        prev_tag, prev_type = tag, chunk_type
    return chunks


def chunks_to_tags(chunks: Iterable[tuple[int, int, str]], length: int,
                   encoding: str = "BIOES") -> list[str]:
    """Tags of `length` tokens for non-overlapping chunks, in "BIOES" or "IOB2" encoding."""
    if encoding not in ("BIOES", "IOB2"):
        raise ValueError(f"unknown tag encoding {encoding!r}; expected BIOES or IOB2")
    tags = [OUTSIDE] * length
    for first, last, chunk_type in chunks:
        for i in range(first, last + 1):
            tags[i] = f"I-{chunk_type}"
        tags[first] = f"B-{chunk_type}"
        if encoding == "BIOES":
            if first == last:
                tags[first] = f"S-{chunk_type}"
            else:
                tags[last] = f"E-{chunk_type}"
    return tags


def bioes_to_iob2(tags: Sequence[str]) -> list[str]:
    """Predicted BIOES tags -> IOB2, resolving ill-formed sequences the lenient way.

    B and S open a chunk; I and E continue the open chunk of their type and open one otherwise
    (after O, after E/S, or after another type); E and S close the chunk.
    """
    out = []
    open_type = None  # type of the chunk the previous token leaves open
    for full_tag in tags:
        prefix, chunk_type = split_tag(full_tag)
        if prefix == OUTSIDE or prefix not in "BIES":
            out.append(OUTSIDE)
            open_type = None
            continue
        starts = prefix in ("B", "S") or open_type != chunk_type
        out.append(f"{'B' if starts else 'I'}-{chunk_type}")
        open_type = None if prefix in ("E", "S") else chunk_type
    return out


# -- conlleval's counts ---------------------------------------------------------------------------


@dataclasses.dataclass
class ChunkCounts:
    """conlleval's counters; `add_sentence` feeds one sentence as the script reads it."""
    tokens: int = 0
    correct_tags: int = 0
    gold: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    guessed: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    correct: collections.Counter = dataclasses.field(default_factory=collections.Counter)

    # The script reads the whole file as one stream; this state carries over sentence breaks.
    _last_gold: tuple[str, str] = dataclasses.field(default=(OUTSIDE, ""), init=False, repr=False)
    _last_guess: tuple[str, str] = dataclasses.field(default=(OUTSIDE, ""), init=False,
                                                     repr=False)
    # The open gold and guessed chunks began on the same token with the same type.
    _in_correct: bool = dataclasses.field(default=False, init=False, repr=False)

    def add_sentence(self, gold_tags: Sequence[str], guessed_tags: Sequence[str]) -> None:
        if len(gold_tags) != len(guessed_tags):
            raise ValueError(f"{len(gold_tags)} gold tags but {len(guessed_tags)} guessed tags")
        # The sentence break afterwards is read as an O/O token that is not counted.
        for row in list(zip(gold_tags, guessed_tags)) + [None]:
            self._add_token(*(row if row is not None else (OUTSIDE, OUTSIDE)),
                            counted=row is not None)

    def _add_token(self, gold_tag: str, guess_tag: str, counted: bool) -> None:
        (last_gold, last_gold_type), (last_guess, last_guess_type) = \
            self._last_gold, self._last_guess
        gold, gold_type = split_tag(gold_tag)
        guess, guess_type = split_tag(guess_tag)
        gold_ends = end_of_chunk(last_gold, gold, last_gold_type, gold_type)
        guess_ends = end_of_chunk(last_guess, guess, last_guess_type, guess_type)
        if self._in_correct:
            if gold_ends and guess_ends and last_guess_type == last_gold_type:
                self._in_correct = False
                self.correct[last_gold_type] += 1
            elif gold_ends != guess_ends or guess_type != gold_type:
                self._in_correct = False
        gold_starts = start_of_chunk(last_gold, gold, last_gold_type, gold_type)
        guess_starts = start_of_chunk(last_guess, guess, last_guess_type, guess_type)
        if gold_starts and guess_starts and guess_type == gold_type:
            self._in_correct = True
        if gold_starts:
            self.gold[gold_type] += 1
        if guess_starts:
            self.guessed[guess_type] += 1
        if counted:
            self.tokens += 1
            self.correct_tags += int(gold == guess and gold_type == guess_type)
        self._last_gold, self._last_guess = (gold, gold_type), (guess, guess_type)

    def _correct(self) -> collections.Counter:
        """Correct chunks, including one still open at the end of the stream (as the script)."""
        correct = collections.Counter(self.correct)
        if self._in_correct:
            correct[self._last_gold[1]] += 1
        return correct

    @staticmethod
    def _prf(correct: int, guessed: int, gold: int) -> tuple[float, float, float]:
        precision = 100.0 * correct / guessed if guessed else 0.0
        recall = 100.0 * correct / gold if gold else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        return precision, recall, f1

    def overall(self) -> tuple[float, float, float]:
        return self._prf(sum(self._correct().values()), sum(self.guessed.values()),
                         sum(self.gold.values()))

    def per_type(self) -> dict[str, tuple[float, float, float]]:
        """(precision, recall, F1) of every type seen in gold or guessed chunks."""
        types = sorted(set(self.gold) | set(self.guessed))
        correct = self._correct()
        return {t: self._prf(correct[t], self.guessed[t], self.gold[t]) for t in types}

    def accuracy(self) -> float:
        return 100.0 * self.correct_tags / self.tokens if self.tokens else 0.0

    def report(self) -> str:
        """The text conlleval prints."""
        precision, recall, f1 = self.overall()
        lines = [f"processed {self.tokens} tokens with {sum(self.gold.values())} phrases; "
                 f"found: {sum(self.guessed.values())} phrases; "
                 f"correct: {sum(self._correct().values())}."]
        if self.tokens:
            lines.append(f"accuracy: {self.accuracy():6.2f}%; precision: {precision:6.2f}%; "
                         f"recall: {recall:6.2f}%; FB1: {f1:6.2f}")
        for t, (p, r, f) in self.per_type().items():
            lines.append(f"{t:>17}: precision: {p:6.2f}%; recall: {r:6.2f}%; FB1: {f:6.2f}  "
                         f"{self.guessed[t]}")
        return "\n".join(lines) + "\n"

    def results(self) -> list[tuple[str, float]]:
        """Overall precision/recall/f1/accuracy, then "<TYPE>/precision" ... per type."""
        precision, recall, f1 = self.overall()
        results = [("precision", precision), ("recall", recall), ("f1", f1),
                   ("accuracy", self.accuracy())]
        for t, (p, r, f) in self.per_type().items():
            results += [(f"{t}/precision", p), (f"{t}/recall", r), (f"{t}/f1", f)]
        return results


def conlleval(sentences: Iterable[tuple[Sequence[str], Sequence[str]]]) -> ChunkCounts:
    """Counts over (gold tags, guessed tags) sentence pairs."""
    counts = ChunkCounts()
    for gold, guessed in sentences:
        counts.add_sentence(gold, guessed)
    return counts


# -- scorer ---------------------------------------------------------------------------------------


@dataclasses.dataclass
class TaggedSentence:
    """What the scorer needs of an example: its words and gold tags (as in the file)."""
    eid: int
    words: Sequence[str]
    tags: Sequence[str]
    source: str = ""


class ChunkF1Scorer(scorer.Scorer):
    """Merges the per-window outputs of the tagging head back into sentences and scores them.

    Each row (one window of a sentence) carries `eid`, `first_word` (sentence index of its first
    word slot), `predictions` and `labels_mask` per word slot ([S]; mask 1 on the words that window
    is responsible for) and `loss` (summed over those words). Every word must be predicted
    exactly once; a missing or doubled word is an error, never a silent gap.

    With span_tags False the labels are plain per-token tags (e.g. POS): they are compared as
    they are and only token accuracy is reported (chunks would mean nothing).
    """

    def __init__(self, sentences: Sequence[TaggedSentence], label_list: Sequence[str],
                 span_tags: bool = True):
        super().__init__()
        self._sentences = {s.eid: s for s in sentences}
        self._label_list = list(label_list)
        self._span_tags = span_tags
        self._predicted: dict[int, list[int | None]] = {
            s.eid: [None] * len(s.words) for s in sentences}
        self._total_word_loss = 0.0
        self._n_words = 0

    def update(self, results: Mapping[str, Any]) -> None:
        super().update(results)
        eid = int(np.asarray(results["eid"]).item())
        if eid not in self._predicted:
            raise ValueError(f"outputs for unknown sentence {eid}")
        slots = self._predicted[eid]
        first = int(np.asarray(results["first_word"]).item())
        predictions = np.asarray(results["predictions"])
        for j in np.flatnonzero(np.asarray(results["labels_mask"]) > 0):
            word = first + int(j)
            if word >= len(slots):
                raise ValueError(f"sentence {eid}: prediction for word {word} but the sentence "
                                 f"has {len(slots)} words")
            if slots[word] is not None:
                raise ValueError(f"sentence {eid}: word {word} predicted twice")
            slots[word] = int(predictions[j])
            self._n_words += 1
        self._total_word_loss += float(np.asarray(results["loss"]).sum())

    def get_loss(self) -> float:
        """Mean loss per word (the head sums over words)."""
        return self._total_word_loss / max(self._n_words, 1)

    def predicted_tags(self, eid: int) -> list[str]:
        """Tags predicted for a sentence (IOB2 for chunk tags)."""
        slots = self._predicted[eid]
        missing = [i for i, p in enumerate(slots) if p is None]
        if missing:
            s = self._sentences[eid]
            raise ValueError(f"sentence {eid} ({s.source}): no prediction for words {missing[:10]} "
                             f"of {len(slots)}; were some windows not evaluated?")
        tags = [self._label_list[p] for p in slots]
        return bioes_to_iob2(tags) if self._span_tags else tags

    def tagged_sentences(self) -> list[tuple[TaggedSentence, list[str]]]:
        """Every sentence (in eid order) with its predicted IOB2 tags."""
        return [(self._sentences[eid], self.predicted_tags(eid)) for eid in sorted(self._sentences)]

    def counts(self) -> ChunkCounts:
        return conlleval((s.tags, predicted) for s, predicted in self.tagged_sentences())

    def _get_results(self) -> list[tuple[str, float]]:
        counts = self.counts()
        results = counts.results() if self._span_tags else [("accuracy", counts.accuracy())]
        return results + [("loss", self.get_loss())]

    def collapse(self) -> str | None:
        tagged = self.tagged_sentences()
        return health.tagging_collapse([tags for _, tags in tagged],
                                       [sentence.tags for sentence, _ in tagged])

    def report(self) -> str:
        """What conlleval prints; for token tags, the token accuracy."""
        counts = self.counts()
        if self._span_tags:
            return counts.report()
        return (f"processed {counts.tokens} tokens; accuracy: {counts.accuracy():6.2f}% "
                f"({counts.correct_tags} tags correct)\n")

    def conll_text(self) -> str:
        """"word gold predicted" lines, a blank line after each sentence (conlleval's input)."""
        lines = []
        for s, predicted in self.tagged_sentences():
            lines += [f"{w} {g} {p}" for w, g, p in zip(s.words, s.tags, predicted)]
            lines.append("")
        return "\n".join(lines) + ("\n" if lines else "")
