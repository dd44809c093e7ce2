"""The rule-based sentence splitter: boundaries it finds and skips, and no text lost."""
import itertools

import pytest

from pretrain.builder.sentences import split_sentences


@pytest.mark.parametrize("text, expected", [
    ("He left. She stayed.", ["He left. ", "She stayed."]),
    ("Why? Because! Then it ended.", ["Why? ", "Because! ", "Then it ended."]),
    ("It rained in 1990. 2001 was dry.", ["It rained in 1990. ", "2001 was dry."]),
    # Closing quotes and brackets stay with their sentence; opening ones start the next.
    ('He said "Go." Then he left.', ['He said "Go." ', "Then he left."]),
    ("(It was late.) \u201cNo,\u201d she said.", ["(It was late.) ", "\u201cNo,\u201d she said."]),
    ("The end... Another one.", ["The end... ", "Another one."]),
    ("Several  spaces.\tA tab.", ["Several  spaces.\t", "A tab."]),
])
def test_boundaries(text, expected):
    assert split_sentences(text) == expected


@pytest.mark.parametrize("text", [
    "Mr. Smith met Dr. Jones at St. Mary's.",
    "Apples, pears, etc. Were sold, e.g. Bramleys, i.e. Cooking apples.",
    "The U.S. Army and Washington, D.C. Police.",
    "J. R. R. Tolkien wrote it.",
    "See No. 5 and Fig. 3 on p. 12.",
    "Born Jan. 5, 1990 and Sept. 2 in Vol. 2.",
    "The value was 3.5 and the file was a.txt here.",
    "Is it? yes. it is! not capitalised.",  # a lower-case start is no new sentence
])
def test_no_boundary(text):
    assert split_sentences(text) == [text]


def test_edge_inputs():
    assert split_sentences("") == [""]
    assert split_sentences("No full stop") == ["No full stop"]
    assert split_sentences("Ends with whitespace. ") == ["Ends with whitespace. "]
    assert split_sentences("He said no. Then left.") == ["He said no. ", "Then left."]
    assert split_sentences("Chapter No. 5 follows.") == ["Chapter No. 5 follows."]


def test_real_corpus_lines_are_rebuilt_exactly(shared_data):
    path = shared_data / "pretrain_corpus" / "enwiki_wiki_00.txt"
    with open(path, encoding="utf-8") as f:
        lines = [line.rstrip("\n") for line in itertools.islice(f, 2000)]
    pieces = [split_sentences(line) for line in lines]
    for line, parts in zip(lines, pieces):
        assert "".join(parts) == line
        assert all(parts) or parts == [""]
    long_lines = [parts for line, parts in zip(lines, pieces) if len(line) > 1000]
    assert len(long_lines) > 20
    assert all(len(parts) > 2 for parts in long_lines)  # long paragraphs hold several sentences
    # Most pieces of a split line look like sentences: they end at a full stop.
    ends = [p.rstrip()[-1] for parts in pieces if len(parts) > 1 for p in parts]
    assert sum(c in ".!?\"')" for c in ends) / len(ends) > 0.98
