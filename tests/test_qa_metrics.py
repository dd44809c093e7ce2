"""QA metrics against hand-computed values; answer decoding (n-best, text mapping, null score)."""
import gzip
import json

import numpy as np
import pytest

import configure_finetuning
from finetune.qa import mrqa_official_eval
from finetune.qa import qa_data
from finetune.qa import qa_features
from finetune.qa import qa_metrics
from finetune.qa import squad_official_eval as v2
from finetune.qa import squad_official_eval_v1 as v1


# -- normalisation, EM, F1 -------------------------------------------------------------------

@pytest.mark.parametrize("text, expected", [
    ("The  Cat's, hat!", "cats hat"),
    ("an apple a day", "apple day"),
    ("Theater thespian", "theater thespian"),  # articles only as whole words
    ("A", ""),
    ("  Denver\tBroncos\n", "denver broncos"),
    ("«Zürich»", "«zürich»"),  # only ASCII punctuation is removed
    ("U.S.-based", "usbased"),
])
def test_normalize_answer(text, expected):
    assert v1.normalize_answer(text) == expected


def test_v1_exact_and_f1_by_hand():
    assert v1.exact_match_score("the Denver Broncos", "Denver Broncos")
    assert v1.f1_score("the Denver Broncos", "Denver Broncos") == 1.0
    # pred {denver}, gold {denver, broncos}: P 1, R 1/2 -> F1 2/3.
    assert v1.f1_score("Denver", "Denver Broncos") == pytest.approx(2 / 3)
    # pred {denver, broncos, won}, gold {broncos}: P 1/3, R 1 -> 1/2.
    assert v1.f1_score("Denver Broncos won", "Broncos.") == pytest.approx(0.5)
    # Tokens are a bag: pred {x, x}, gold {x}: 1 shared, P 1/2, R 1 -> 2/3.
    assert v1.f1_score("x x", "x") == pytest.approx(2 / 3)
    # Empty prediction: no shared token -> 0; v1 also gives 0 when both sides normalise to "".
    assert v1.f1_score("", "Denver") == 0.0
    assert v1.exact_match_score("a", "The") and v1.f1_score("a", "The") == 0.0


def test_v1_evaluate_multiple_gold_answers_and_missing_predictions(capsys):
    gold = {"q1": ["Denver Broncos", "the Broncos"], "q2": ["1858"], "q3": ["blue"]}
    predictions = {"q1": "Broncos", "q2": "in 1858"}
    results = v1.evaluate(gold, predictions)
    # q1: best gold "the Broncos" -> EM 1, F1 1; q2: EM 0, F1 2*(1/2*1)/(1.5) = 2/3;
    # q3 missing -> 0 (and counted in the total).
    assert results["exact_match"] == pytest.approx(100 / 3)
    assert results["f1"] == pytest.approx(100 * (1 + 2 / 3) / 3)
    assert "Unanswered question q3" in capsys.readouterr().err


def test_v2_exact_and_f1_by_hand():
    assert v2.compute_f1("", "") == 1.0  # both "no answer"
    assert v2.compute_f1("Denver", "") == 0.0
    assert v2.compute_f1("", "Denver") == 0.0
    assert v2.compute_f1("the", "a") == 1.0  # both normalise to no tokens
    assert v2.compute_f1("Denver Broncos", "Denver") == pytest.approx(2 / 3)
    assert v2.compute_exact("The Broncos!", "broncos") == 1


def test_v2_evaluate_splits_and_threshold_by_hand():
    gold = {"a": ["Denver Broncos"], "b": ["1858", "in 1858"], "c": [], "d": []}
    predictions = {"a": "Denver", "b": "1858", "c": "Paris", "d": ""}
    odds = {"a": 1.0, "b": -2.0, "c": 3.0, "d": 0.5}
    # Threshold 0.8: "a" (1.0) and "c" (3.0) become "no answer".
    results = v2.evaluate(gold, predictions, odds, na_prob_thresh=0.8)
    # exact: a 0 (answerable, said no), b 1, c 1 (no answer), d 1 ("" == "") -> 75
    # f1:    a 0, b 1, c 1, d 1 -> 75
    assert results["exact"] == pytest.approx(75.0) and results["f1"] == pytest.approx(75.0)
    assert results["total"] == 4
    assert results["HasAns_exact"] == pytest.approx(50.0)
    assert results["HasAns_total"] == 2 and results["NoAns_total"] == 2
    assert results["NoAns_exact"] == pytest.approx(100.0)
    # Best threshold, questions by null odds: b -2.0, d 0.5, a 1.0, c 3.0; start = 2 (no-ans).
    # exact: b +1 -> 3 (thresh -2.0); d +0 (pred "") -> 3; a +0 -> 3; c -1 -> 2. Best 3/4 at -2.
    assert results["best_exact"] == pytest.approx(75.0)
    assert results["best_exact_thresh"] == -2.0
    # f1: b +1 -> 3; d 3; a +2/3 -> 3.667 (thresh 1.0); c -1 -> 2.667. Best 3.667/4 at 1.0.
    assert results["best_f1"] == pytest.approx(100 * (3 + 2 / 3) / 4)
    assert results["best_f1_thresh"] == 1.0


def test_v2_best_threshold_is_zero_when_answering_nothing_is_best():
    gold = {"a": [], "b": []}
    results = v2.evaluate(gold, {"a": "x", "b": "y"}, {"a": 1.0, "b": 2.0}, 5.0)
    assert results["exact"] == 0.0 and "HasAns_exact" not in results
    assert results["best_exact"] == 100.0 and results["best_exact_thresh"] == 0.0


def test_v2_without_null_odds_and_gold_that_normalises_to_nothing():
    # Gold answers normalising to "" are dropped, leaving "" as the only gold answer.
    results = v2.evaluate({"q": ["The"]}, {"q": ""})
    assert results["exact"] == 100.0 and "best_f1" not in results


def test_mrqa_evaluate_and_read_answers(tmp_path, capsys):
    lines = [{"header": {"dataset": "X", "split": "dev"}},
             {"context": "c", "qas": [{"qid": "1", "question": "?", "answers": ["Paris", "paris!"]},
                                      {"qid": "2", "question": "?", "answers": ["Rome"]}]}]
    path = tmp_path / "dev.jsonl.gz"
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.write("\n".join(json.dumps(line) for line in lines) + "\n")
    answers = mrqa_official_eval.read_answers(str(path))
    assert answers == {"1": ["Paris", "paris!"], "2": ["Rome"]}
    assert mrqa_official_eval.evaluate(answers, {"1": "PARIS"}) == {"exact_match": 50.0,
                                                                    "f1": 50.0}
    assert "Unanswered question 2" in capsys.readouterr().out
    assert mrqa_official_eval.evaluate(answers, {"1": "PARIS"}, skip_no_answer=True) == {
        "exact_match": 100.0, "f1": 100.0}


# -- decoding ------------------------------------------------------------------------------

def test_compute_softmax_and_best_indexes():
    probs = qa_metrics.compute_softmax([1000.0, 1000.0 + np.log(3.0)])
    assert probs == pytest.approx([0.25, 0.75])
    assert qa_metrics.compute_softmax([]) == []
    assert qa_metrics.get_best_indexes([0.1, 3.0, -1.0, 3.0], 3) == [1, 3, 0]


@pytest.mark.parametrize("pred, orig, expected", [
    ("steve smith", "Steve Smith's", "Steve Smith"),
    ("1895", "(1895-1943).", "1895"),
    ("zurich", "Zürich,", "Zürich"),  # accents stripped by the tokenizer come back
    ("東 京", "首都是東京。", "東京"),
    ("nowhere", "Somewhere else", "Somewhere else"),  # not found: the whole original span
])
def test_get_final_text(pred, orig, expected):
    assert qa_metrics.get_final_text(pred, orig, do_lower_case=True) == expected


def test_detokenize_wordpiece_and_sentencepiece():
    assert qa_metrics.detokenize(["steve", "smith", "##s", "##on"]) == "steve smithson"
    assert qa_metrics.detokenize(["##ing", "x"]) == "ing x"
    assert qa_metrics.detokenize(["\u2581Steve", "\u2581Smith", "son", "\u2581,"],
                                 sentencepiece=True) == "Steve Smithson ,"
    assert qa_metrics.get_final_text(
        qa_metrics.detokenize(["\u2581Café", "\u2581M", "üller"], sentencepiece=True),
        "Café Müller's", do_lower_case=False, strip_accents=False) == "Café Müller"


def test_get_final_text_case_sensitive_model():
    assert qa_metrics.get_final_text("Smith", "Smith's", do_lower_case=False) == "Smith"
    # A lower-cased prediction is not found in cased text: falls back to the original span.
    assert qa_metrics.get_final_text("smith", "Smith's", do_lower_case=False) == "Smith's"


def _config(tmp_path, **hparams):
    values = dict(task_names=["squad"], vocab_size=30, init_checkpoint="", max_seq_length=32,
                  n_best_size=3, max_answer_length=3)
    values.update(hparams)
    return configure_finetuning.FinetuningConfig.from_hparams("m", str(tmp_path), values)


def _window(index=0, max_context=None):
    # [CLS] q [SEP] alpha beta ##s gamma [SEP]: positions 3..6 map to words 0, 1, 1, 2.
    tokens = ["[CLS]", "q", "[SEP]", "alpha", "beta", "##s", "gamma", "[SEP]"]
    to_orig = {3: 0, 4: 1, 5: 1, 6: 2}
    max_context = max_context or {p: True for p in to_orig}
    return qa_features.Window(index, 0, 4, tokens, [0, 0, 0, 1, 1, 1, 1, 1], to_orig, max_context)


def _example():
    return qa_data.QAExample(task_name="squad", eid=0, qas_id="q1", question_text="q",
                             doc_tokens=["Alpha", "Betas,", "gamma"])


def _joint_result(starts, start_lp, ends, end_lp, answerable=0.0):
    return {"start_top_index": np.array(starts), "start_top_log_probs": np.array(start_lp),
            "end_top_index": np.array(ends), "end_top_log_probs": np.array(end_lp),
            "answerable_logit": np.float32(answerable), "start_logits": np.zeros(8),
            "end_logits": np.zeros(8)}


def test_predict_question_joint_beam_filters_and_maps_text(tmp_path):
    config = _config(tmp_path)
    # Beam of 3 starts x 3 ends, positions as in _window(). Start 0 ([CLS]) is dropped;
    # start 4: (4, 5) "beta ##s" scores -0.5 - 0.1, (4, 3) has end < start, (4, 7) ends on
    # [SEP]; start 3: (3, 6) is 4 pieces > max_answer_length 3, (3, 5) scores -1.3, (3, 3) -1.4.
    result = _joint_result(
        starts=[0, 4, 3], start_lp=[-0.1, -0.5, -1.0],
        ends=[[3, 4, 5], [5, 3, 7], [6, 5, 3]],
        end_lp=[[-0.1, -0.2, -0.3], [-0.1, -0.2, -0.3], [-0.05, -0.3, -0.4]], answerable=1.5)
    prediction = qa_metrics.predict_question(_example(), [_window()], [result], config, v2=True)
    # Texts come from the original words, without the word's trailing comma.
    assert [e["text"] for e in prediction.nbest] == ["Betas", "Alpha Betas", "Alpha"]
    assert prediction.text == "Betas"
    assert prediction.nbest[0]["start_logit"] == pytest.approx(-0.5)
    assert prediction.nbest[0]["end_logit"] == pytest.approx(-0.1)
    assert [e["probability"] for e in prediction.nbest] == pytest.approx(
        qa_metrics.compute_softmax([-0.6, -1.3, -1.4]))
    assert prediction.null_score == pytest.approx(1.5)


def test_predict_question_uses_max_context_window_and_min_null_score(tmp_path):
    config = _config(tmp_path)
    # Window 0 is not the max-context window for position 4; window 1 is.
    w0 = _window(0, max_context={3: True, 4: False, 5: True, 6: True})
    w1 = _window(1)
    r0 = _joint_result([4, 3, 6], [-0.1, -3.0, -3.0], [[5, 5, 5]] * 3, [[-0.1] * 3] * 3, 2.0)
    r1 = _joint_result([4, 3, 6], [-0.4, -3.0, -3.0], [[5, 5, 5]] * 3, [[-0.1] * 3] * 3, -1.0)
    prediction = qa_metrics.predict_question(_example(), [w0, w1], [r0, r1], config, v2=True)
    # Start 4 counts only in window 1; repeated spans and texts appear once in the n-best.
    assert [e["text"] for e in prediction.nbest] == ["Betas", "Alpha Betas"]
    assert prediction.nbest[0]["start_logit"] == pytest.approx(-0.4)
    assert prediction.null_score == -1.0  # the smaller of the windows' answerability logits


def test_predict_question_without_joint_prediction_or_classifier(tmp_path):
    config = _config(tmp_path, joint_prediction=False, answerable_classifier=False)
    start_logits = np.array([2.0, 0, 0, 1.0, 3.0, 0, 0, 0])
    end_logits = np.array([1.0, 0, 0, 0, 0.5, 2.5, 0, 0])
    result = {"start_logits": start_logits, "end_logits": end_logits}
    prediction = qa_metrics.predict_question(_example(), [_window()], [result], config, v2=True)
    # Best starts 4, 0, 3 x best ends 5, 0, 4: (4, 5) "Betas" 5.5, (4, 4) and (3, 5) 3.5,
    # (3, 4) 1.5; null = start[0] + end[0] - best = 2.0 + 1.0 - 5.5.
    assert [e["text"] for e in prediction.nbest] == ["Betas", "Beta", "Alpha Betas"]
    assert prediction.null_score == pytest.approx(3.0 - 5.5)


def test_predict_question_without_valid_span_gives_placeholder(tmp_path):
    config = _config(tmp_path, answerable_classifier=False)
    result = _joint_result([0, 0, 0], [0.0] * 3, [[0, 0, 0]] * 3, [[0.0] * 3] * 3)
    prediction = qa_metrics.predict_question(_example(), [_window()], [result], config, v2=False)
    assert prediction.text == qa_metrics.EMPTY_PREDICTION and prediction.null_score is None


def test_question_without_windows(tmp_path):
    # An empty context gives no window: no span, and surely "no answer" for SQuAD 2.0.
    prediction = qa_metrics.predict_question(_example(), [], [], _config(tmp_path), v2=True)
    assert prediction.text == qa_metrics.EMPTY_PREDICTION
    assert prediction.null_score == qa_metrics.NO_WINDOW_NULL_SCORE


class _OneWindowTask:
    """A SQuAD 2.0 task whose questions each have _window() and one joint-prediction result."""
    name, is_mrqa = "squad", False

    def __init__(self, config, answerable_logit, gold):
        self.config, self.answerable_logit, self.gold = config, answerable_logit, gold

    def get_examples(self, split):
        return [qa_data.QAExample(task_name="squad", eid=i, qas_id=f"q{i}", question_text="q",
                                  doc_tokens=["Alpha", "Betas,", "gamma"], gold_answers=gold)
                for i, gold in enumerate(self.gold)]

    def predict_questions(self, examples, rows):
        result = _joint_result([4, 3, 6], [-0.1, -3.0, -3.0], [[5, 5, 5]] * 3,
                               [[-0.1] * 3] * 3, self.answerable_logit)
        return {e.qas_id: qa_metrics.predict_question(e, [_window()], [result], self.config,
                                                      v2=True) for e in examples}


@pytest.mark.parametrize("answerable_logit,gold,collapsed", [
    # Null scores above qa_na_threshold (-2.75): every question left unanswered, although the
    # best non-null span of each is "Betas": a collapse.
    (1.5, [["Betas"], []], True),
    (-5.0, [["Betas"], []], False),  # below it: answered
    (1.5, [[], []], False),  # no question answerable: leaving them all is right
])
def test_squad_v2_collapse_reads_the_answers_given(tmp_path, answerable_logit, gold, collapsed):
    config = _config(tmp_path)
    scorer = qa_metrics.SpanBasedQAScorer(config, _OneWindowTask(config, answerable_logit, gold),
                                          "dev", v2=True)
    scorer.update({"loss": 0.0})
    assert scorer.collapse() == ("no dev question gets an answer" if collapsed else None)
    # The files keep the official release's best non-null spans.
    assert set(json.load(open(scorer.paths()["preds"])).values()) == {"Betas"}
