"""conlleval-equivalent chunk scoring on hand-worked examples, tag conversions, window merging."""
import random

import numpy as np
import pytest

from finetune.tagging import tagging_metrics as tm


# -- chunk boundaries -----------------------------------------------------------------------------

@pytest.mark.parametrize("tags, chunks", [
    # IOB2: every chunk starts with B-.
    (["B-NP", "I-NP", "O", "B-VP", "I-VP"], [(0, 1, "NP"), (3, 4, "VP")]),
    # I- right after O (or at the start) starts a chunk (IOB1).
    (["I-NP", "I-NP", "O", "I-VP"], [(0, 1, "NP"), (3, 3, "VP")]),
    # A change of type ends the chunk and starts a new one, B- or not.
    (["B-NP", "I-VP", "I-VP", "I-PP"], [(0, 0, "NP"), (1, 2, "VP"), (3, 3, "PP")]),
    # O between two chunks of the same type: two chunks.
    (["B-NP", "O", "I-NP", "I-NP"], [(0, 0, "NP"), (2, 3, "NP")]),
    # B- after I- of the same type: the chunk ends, another starts.
    (["I-NP", "I-NP", "B-NP", "I-NP"], [(0, 1, "NP"), (2, 3, "NP")]),
    (["B-NP", "B-NP", "B-NP"], [(0, 0, "NP"), (1, 1, "NP"), (2, 2, "NP")]),
    # Types may contain hyphens: the prefix ends at the first one.
    (["B-PP-X", "I-PP-X", "I-PP"], [(0, 1, "PP-X"), (2, 2, "PP")]),
    (["O", "O"], []),
    ([], []),
])
def test_get_chunks_hand_worked(tags, chunks):
    assert tm.get_chunks(tags) == chunks


def test_overall_and_per_type_scores_hand_worked():
    gold = ["B-NP", "I-NP", "O", "B-VP", "I-VP", "B-PP", "B-NP"]
    pred = ["B-NP", "I-NP", "O", "B-VP", "B-VP", "B-PP", "I-NP"]
    # Gold chunks: NP 0-1, VP 3-4, PP 5, NP 6 (4).  Guessed: NP 0-1, VP 3, VP 4, PP 5, and NP 6
    # (I-NP after a PP chunk starts one) (5).  Correct: NP 0-1, PP 5, NP 6 (3).
    counts = tm.conlleval([(gold, pred)])
    assert (sum(counts.gold.values()), sum(counts.guessed.values())) == (4, 5)
    precision, recall, f1 = counts.overall()
    assert precision == pytest.approx(60.0)
    assert recall == pytest.approx(75.0)
    assert f1 == pytest.approx(2 * 60 * 75 / 135)
    # Tokens 4 (I-VP vs B-VP) and 6 (B-NP vs I-NP) differ as strings.
    assert counts.accuracy() == pytest.approx(100 * 5 / 7)
    per_type = counts.per_type()
    assert per_type["NP"] == pytest.approx((100.0, 100.0, 100.0))
    assert per_type["VP"] == pytest.approx((0.0, 0.0, 0.0))
    assert per_type["PP"] == pytest.approx((100.0, 100.0, 100.0))
    results = dict(counts.results())
    assert results["f1"] == pytest.approx(f1) and results["VP/recall"] == 0.0
    assert counts.report() == (
        "processed 7 tokens with 4 phrases; found: 5 phrases; correct: 3.\n"
        "accuracy:  71.43%; precision:  60.00%; recall:  75.00%; FB1:  66.67\n"
        "               NP: precision: 100.00%; recall: 100.00%; FB1: 100.00  2\n"
        "               PP: precision: 100.00%; recall: 100.00%; FB1: 100.00  1\n"
        "               VP: precision:   0.00%; recall:   0.00%; FB1:   0.00  2\n")


def test_same_chunks_in_another_scheme_score_full_f1_but_not_full_accuracy():
    gold = ["I-NP", "I-NP", "B-NP", "O", "I-VP"]  # IOB1
    pred = ["B-NP", "I-NP", "B-NP", "O", "B-VP"]  # IOB2, the same chunks
    counts = tm.conlleval([(gold, pred)])
    assert counts.overall() == pytest.approx((100.0, 100.0, 100.0))
    assert counts.accuracy() == pytest.approx(60.0)


def test_chunk_boundaries_must_match_exactly():
    gold = ["B-NP", "I-NP", "I-NP"]
    for pred in (["B-NP", "I-NP", "O"], ["O", "B-NP", "I-NP"], ["B-NP", "I-NP", "B-NP"],
                 ["B-VP", "I-VP", "I-VP"]):
        assert sum(tm.conlleval([(gold, pred)]).correct.values()) == 0, pred


def test_sentence_break_ends_chunks():
    # An I-NP opening sentence 2 is a new chunk, not the continuation of sentence 1's NP.
    counts = tm.conlleval([(["B-NP"], ["B-NP"]), (["I-NP"], ["B-NP"])])
    assert (sum(counts.gold.values()), sum(counts.guessed.values()),
            sum(counts.correct.values())) == (2, 2, 2)


def test_no_chunks_scores_zero_without_dividing_by_zero():
    counts = tm.conlleval([(["O", "O"], ["O", "O"])])
    assert counts.overall() == (0.0, 0.0, 0.0)
    assert counts.accuracy() == 100.0
    assert tm.conlleval([]).report() == (
        "processed 0 tokens with 0 phrases; found: 0 phrases; correct: 0.\n")


def test_counts_equal_span_set_matching_on_random_iob():
    # For B/I/O tags conlleval's streaming count equals matching (start, end, type) sets.
    rng = random.Random(0)
    tags = ["O", "B-NP", "I-NP", "B-VP", "I-VP", "I-PP"]
    for _ in range(300):
        pairs = []
        for _ in range(rng.randint(1, 4)):
            gold = [rng.choice(tags) for _ in range(rng.randint(1, 8))]
            pred = [t if rng.random() < 0.6 else rng.choice(tags) for t in gold]
            pairs.append((gold, pred))
        counts = tm.conlleval(pairs)
        expected = sum(len(set(tm.get_chunks(g)) & set(tm.get_chunks(p))) for g, p in pairs)
        assert sum(counts.correct.values()) == expected
        assert sum(counts.gold.values()) == sum(len(tm.get_chunks(g)) for g, _ in pairs)


# -- tag conversions ------------------------------------------------------------------------------

def test_chunks_to_tags():
    chunks = [(0, 1, "NP"), (2, 2, "VP"), (4, 6, "PP")]
    assert tm.chunks_to_tags(chunks, 7, "BIOES") == [
        "B-NP", "E-NP", "S-VP", "O", "B-PP", "I-PP", "E-PP"]
    assert tm.chunks_to_tags(chunks, 7, "IOB2") == [
        "B-NP", "I-NP", "B-VP", "O", "B-PP", "I-PP", "I-PP"]
    with pytest.raises(ValueError, match="unknown tag encoding"):
        tm.chunks_to_tags(chunks, 7, "IOE")


@pytest.mark.parametrize("bioes, iob2", [
    (["B-NP", "I-NP", "E-NP", "S-VP", "O"], ["B-NP", "I-NP", "I-NP", "B-VP", "O"]),
    (["S-NP", "S-NP"], ["B-NP", "B-NP"]),
    # Ill-formed: I/E without an open chunk of their type open one; E and S close theirs.
    (["I-NP", "E-NP", "I-NP"], ["B-NP", "I-NP", "B-NP"]),
    (["B-NP", "I-VP", "E-VP"], ["B-NP", "B-VP", "I-VP"]),
    (["O", "E-NP", "S-NP", "E-NP"], ["O", "B-NP", "B-NP", "B-NP"]),
])
def test_bioes_to_iob2(bioes, iob2):
    assert tm.bioes_to_iob2(bioes) == iob2


def test_bioes_round_trip_keeps_chunks():
    rng = random.Random(1)
    for _ in range(200):
        tags = [rng.choice(["O", "B-NP", "I-NP", "I-VP", "B-PP"]) for _ in range(rng.randint(0, 9))]
        chunks = tm.get_chunks(tags)
        bioes = tm.chunks_to_tags(chunks, len(tags), "BIOES")
        assert tm.get_chunks(tm.bioes_to_iob2(bioes)) == chunks


# -- merging windows in the scorer ----------------------------------------------------------------

LABELS = ["B-NP", "E-NP", "I-NP", "O", "S-NP"]


def _row(eid, first, predictions, mask, loss=1.0):
    n = 6
    return {"eid": np.int32(eid), "first_word": np.int32(first), "loss": np.float32(loss),
            "predictions": np.array(predictions + [0] * (n - len(predictions)), np.int32),
            "labels_mask": np.array(mask + [0.0] * (n - len(mask)), np.float32)}


def _sentences():
    return [tm.TaggedSentence(0, ["the", "big", "cat", "sat"], ["B-NP", "I-NP", "I-NP", "O"]),
            tm.TaggedSentence(1, ["dogs"], ["B-NP"])]


def test_scorer_merges_windows_and_writes_conll():
    scorer = tm.ChunkF1Scorer(_sentences(), LABELS)
    # Sentence 0 in two overlapping windows: words 0-2 (owns 0-1) and words 1-3 (owns 2-3).
    scorer.update(_row(0, 0, [0, 2, 2], [1.0, 1.0, 0.0], loss=2.0))
    scorer.update(_row(1, 0, [4], [1.0], loss=0.5))
    scorer.update(_row(0, 1, [2, 1, 3], [0.0, 1.0, 1.0], loss=1.5))
    results = dict(scorer.get_results())
    assert results["f1"] == 100.0 and results["accuracy"] == 100.0
    assert results["loss"] == pytest.approx(4.0 / 5)  # per word
    assert scorer.conll_text() == ("the B-NP B-NP\nbig I-NP I-NP\ncat I-NP I-NP\nsat O O\n\n"
                                   "dogs B-NP B-NP\n\n")


def test_scorer_refuses_missing_or_doubled_words():
    scorer = tm.ChunkF1Scorer(_sentences(), LABELS)
    scorer.update(_row(0, 0, [0, 2, 2], [1.0, 1.0, 0.0]))
    scorer.update(_row(1, 0, [4], [1.0]))
    with pytest.raises(ValueError, match=r"no prediction for words \[2, 3\]"):
        scorer.get_results()
    with pytest.raises(ValueError, match="word 1 predicted twice"):
        scorer.update(_row(0, 1, [2, 1, 3], [1.0, 1.0, 1.0]))
    with pytest.raises(ValueError, match="unknown sentence 7"):
        scorer.update(_row(7, 0, [0], [1.0]))
