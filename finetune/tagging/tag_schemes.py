"""Which scheme a file's chunk tags follow, read off the tags themselves, and their IOB2 form.

Span tags come in several schemes that mark the same chunks differently:
  - IOB2 (BIO): every chunk begins with B-<type>, continues with I-<type>;
  - IOB1: a chunk begins with I-<type>; B-<type> only begins a chunk right after another chunk of
    the same type (CoNLL-2003's original files);
  - BIOES (IOBES): B- begins, I- continues, E- ends a chunk; S- is a chunk of one token.
Scoring and training read IOB2: a file in another scheme is converted on reading (the chunks stay
the same, as conlleval reads them), after its scheme is established from the file. A file mixing
schemes, or a tag its scheme does not allow where it stands, is refused naming file, line and tag:
its chunks would otherwise be a guess.
"""
from typing import Sequence

from finetune import task as task_lib
from finetune.tagging import tagging_metrics as tm

IOB1, IOB2, BIOES = "IOB1", "IOB2", "BIOES"


def _where(sentence, i: int) -> str:
    return f"{sentence.path}:{sentence.lines[i]}: tag {sentence.tags[i]!r}"


def _after(sentence, i: int) -> str:
    return f"after {sentence.tags[i - 1]!r}" if i else "at the start of a sentence"


def detect(sentences: Sequence, default: str = IOB2) -> str:
    """The scheme of a file's chunk tags (sentences: .path, .tags, .lines); `default` for a file
    that shows none (no chunk).

    Raises:
      TaskDataError: tags of two schemes, or a BIOES tag out of place; naming file, line and tag.
    """
    if any(tm.split_tag(t)[0] in ("E", "S") for s in sentences for t in s.tags):
        check_bioes(sentences)
        return BIOES
    iob1 = iob2 = None  # (sentence, index) of the first tag only that scheme allows
    for s in sentences:
        previous = (tm.OUTSIDE, "")
        for i, tag in enumerate(s.tags):
            prefix, chunk_type = tm.split_tag(tag)
            follows_its_type = previous[0] != tm.OUTSIDE and previous[1] == chunk_type
            if prefix == "I" and not follows_its_type and iob1 is None:
                iob1 = (s, i)  # a chunk begun by I-
            if prefix == "B" and not follows_its_type and iob2 is None:
                iob2 = (s, i)  # B- where no chunk of its type precedes it
            previous = (prefix, chunk_type)
    if iob1 and iob2:
        (s1, i1), (s2, i2) = iob1, iob2
        raise task_lib.TaskDataError(
            f"{_where(s1, i1)} begins a chunk {_after(s1, i1)} (IOB1), but {_where(s2, i2)} "
            f"{_after(s2, i2)} begins one with B- (IOB2): the file mixes two tag schemes, so its "
            f"chunks are ambiguous; write it in one (IOB2: every chunk begins with B-)")
    if iob1:
        return IOB1
    return IOB2 if iob2 else default


def check_bioes(sentences: Sequence) -> None:
    """Every tag where BIOES allows it: B-/S- begin a chunk, I-/E- continue one of their type.

    Raises:
      TaskDataError: naming file, line and the tag out of place.
    """
    for s in sentences:
        open_type = None  # the type of a chunk begun and not yet ended
        for i, tag in enumerate(s.tags):
            prefix, chunk_type = tm.split_tag(tag)
            inside = prefix in ("I", "E")
            if inside != (open_type is not None) or inside and chunk_type != open_type:
                wanted = (f"I-{open_type} or E-{open_type} to continue the chunk"
                          if open_type is not None else "O, B- or S- (no chunk is open)")
                raise task_lib.TaskDataError(
                    f"{_where(s, i)} {_after(s, i)} is out of place in BIOES tags (the file has "
                    f"E-/S- tags): expected {wanted}")
            open_type = chunk_type if prefix in ("B", "I") else None
        if open_type is not None:
            raise task_lib.TaskDataError(
                f"{_where(s, len(s.tags) - 1)} ends its sentence inside a chunk: BIOES chunks end "
                f"with E-{open_type} (or are S-{open_type})")


def to_iob2(tags: Sequence[str], scheme: str) -> list[str]:
    """A sentence's tags in IOB2 (the same chunks, as conlleval reads them)."""
    if scheme == BIOES:
        return tm.bioes_to_iob2(tags)
    if scheme == IOB1:
        return tm.chunks_to_tags(tm.get_chunks(tags), len(tags), "IOB2")
    return list(tags)
