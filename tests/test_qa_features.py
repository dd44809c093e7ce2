"""QA data: reading (schema errors, answer checks), windows, answer mapping, features."""
import json
import logging

import numpy as np
import pytest

import configure_finetuning
from finetune import task as task_lib
from finetune import task_builder
from finetune.qa import qa_data
from finetune.qa import qa_features
from finetune.qa import qa_metrics

WORDS = [f"w{i}" for i in range(40)]
VOCAB = (["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "what", "who", "when", "is", "the", "?",
          ".", ",", "(", ")", "-", "leader", "was", "john", "smith", "1895", "1943", "year",
          "born", "un", "##aff", "##able", "japanese", "japan", "cafe", "muller", "won", "in",
          "zurich", "東", "京", "首", "都", "是", "。", "paris", "capital", "france", "of"]
         + WORDS)


def make_task(tmp_path, name="squadv1", files=None, **hparams):
    """A QA task over files written to tmp_path/<name>/ (split file name -> JSON object or
    list of JSONL objects)."""
    directory = tmp_path / name
    directory.mkdir(parents=True, exist_ok=True)
    for filename, content in (files or {}).items():
        if filename.endswith(".json"):
            text = json.dumps(content)
        else:
            text = "\n".join(json.dumps(line) for line in content) + "\n"
        (directory / filename).write_text(text, encoding="utf-8")
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
    values = dict(task_names=[name], vocab_size=len(VOCAB), init_checkpoint="",
                  raw_data_dir=str(tmp_path / "{task}"), vocab_file=str(vocab),
                  max_seq_length=64, max_query_length=8, doc_stride=16)
    values.update(hparams)
    config = configure_finetuning.FinetuningConfig.from_hparams("m", str(tmp_path), values)
    return task_builder.get_tasks(config)[0]


def squad_file(paragraphs, version="1.1", title="T"):
    return {"version": version, "data": [{"title": title, "paragraphs": paragraphs}]}


def qa(qid, question, answers=(), **extra):
    return dict(id=qid, question=question,
                answers=[{"text": t, "answer_start": s} for t, s in answers], **extra)


# -- words and windows ------------------------------------------------------------------------

def test_split_words_uses_the_official_whitespace():
    words, char_to_word = qa_data.split_words(" ab  c\u202fd\u00a0e\n")
    # U+202F separates words; U+00A0 does not (the tokenizer splits it later).
    assert words == ["ab", "c", "d\u00a0e"]
    assert char_to_word == [-1, 0, 0, 0, 0, 1, 1, 2, 2, 2, 2]


def test_doc_spans_and_max_context():
    spans = qa_features.doc_spans(30, 10, 4)
    assert spans == [(0, 10), (4, 10), (8, 10), (12, 10), (16, 10), (20, 10)]
    assert qa_features.doc_spans(5, 10, 4) == [(0, 5)]
    # Stride longer than a window: windows follow each other without overlap.
    assert qa_features.doc_spans(25, 10, 128) == [(0, 10), (10, 10), (20, 5)]
    best = qa_features.max_context_spans(spans, 30)
    # Piece 9: windows 0 (min(9, 0)), 1 (min(5, 4)) and 2 (min(1, 8)) -> window 1.
    assert best[9] == 1 and best[0] == 0 and best[29] == 5
    # Ties go to the first window: piece 6 scores min(2, 7)=2 in window 1, min(6, 3)=3 in 0.
    assert best[6] == 0


def test_answer_at_window_boundary_and_out_of_window(tmp_path):
    context = " ".join(WORDS[:30])
    offset = context.index("w9 ")
    task = make_task(tmp_path, files={"train.json": squad_file([{"context": context, "qas": [
        qa("a", "what", [("w9", offset)]), qa("b", "what", [("w9 w10", offset)])]}])},
        max_seq_length=14, doc_stride=4)  # 14 - [CLS] what [SEP] [SEP] = 10 pieces per window
    first, second = task.get_examples("train")
    windows = task.windows(first, is_training=True)
    assert [(w.doc_start, w.length) for w in windows] == [
        (0, 10), (4, 10), (8, 10), (12, 10), (16, 10), (20, 10)]
    # "w9" is the last piece of window 0 (position 3 + 9), inside windows 1 and 2, outside later.
    assert [(w.start_position, w.end_position) for w in windows] == [
        (12, 12), (8, 8), (4, 4), (0, 0), (0, 0), (0, 0)]
    assert windows[0].tokens[12] == windows[1].tokens[8] == "w9"
    assert [w.token_is_max_context[p] for w, p in zip(windows[:3], (12, 8, 4))] == [
        False, True, False]
    assert windows[1].token_to_orig_map[8] == 9
    # "w9 w10" crosses the end of window 0: only windows 1 and 2 hold it.
    spans = [(w.start_position, w.end_position) for w in task.windows(second, True)]
    assert spans[:3] == [(0, 0), (8, 9), (4, 5)]

    features = task.featurize(first, is_training=True)
    assert len(features) == 6
    f = features[1]
    assert f["squadv1_eid"] == 1 and f["squadv1_start_positions"] == 8
    assert f["squadv1_is_impossible"] == 0 and f["task_id"] == 0
    ids = {t: i for i, t in enumerate(VOCAB)}
    assert f["input_ids"] == [ids["[CLS]"], ids["what"], ids["[SEP]"]] + [
        ids[f"w{i}"] for i in range(4, 14)] + [ids["[SEP]"]]
    assert f["segment_ids"] == [0] * 3 + [1] * 11 and f["input_mask"] == [1] * 14
    # Evaluation features carry no labels; eid = 1000 * question + window.
    eval_features = task.featurize(second, is_training=False)
    assert [f["squadv1_eid"] for f in eval_features] == [1000 + i for i in range(6)]
    assert "squadv1_start_positions" not in eval_features[0]


def test_answer_mapped_to_word_pieces(tmp_path):
    context = "The leader was John Smith (1895-1943). the japanese"
    task = make_task(tmp_path, files={"train.json": squad_file([{"context": context, "qas": [
        qa("year", "when", [("1895", context.index("1895"))]),
        qa("partial", "what", [("japan", context.index("japanese"))])]}])})
    year, partial = task.get_examples("train")
    assert year.doc_tokens[year.start_position] == "(1895-1943)."
    window = task.windows(year, True)[0]
    # The word "(1895-1943)." is six pieces; the answer is exactly the piece "1895".
    assert window.tokens[window.start_position:window.end_position + 1] == ["1895"]
    # "Japan" annotated inside the one-piece word "japanese": the whole piece is the answer.
    window = task.windows(partial, True)[0]
    assert window.tokens[window.start_position:window.end_position + 1] == ["japanese"]


def test_long_word_split_into_pieces_across_windows(tmp_path):
    context = "w0 w1 w2 w3 unaffable w4 w5 w6"
    task = make_task(tmp_path, files={"train.json": squad_file([{"context": context, "qas": [
        qa("q", "what", [("unaffable", context.index("unaffable"))])]}])},
        max_seq_length=9, doc_stride=2)  # 5 pieces per window, stride 2
    example = task.get_examples("train")[0]
    doc = qa_features.tokenize_doc(example.doc_tokens, task._tokenizer)
    assert doc.tokens == ["w0", "w1", "w2", "w3", "un", "##aff", "##able", "w4", "w5", "w6"]
    assert doc.tok_to_orig == [0, 1, 2, 3, 4, 4, 4, 5, 6, 7]
    assert doc.orig_to_tok == [0, 1, 2, 3, 4, 7, 8, 9]
    windows = task.windows(example, True)
    assert [(w.doc_start, w.length) for w in windows] == [(0, 5), (2, 5), (4, 5), (6, 4)]
    # Window 0 (pieces 0-4) cuts the word after "un": no answer there. Windows 1 (2-6) and
    # 2 (4-8) hold all three pieces; "un" has the most context in window 1.
    assert [(w.start_position, w.end_position) for w in windows] == [
        (0, 0), (5, 7), (3, 5), (0, 0)]
    assert windows[1].tokens[5:8] == ["un", "##aff", "##able"]
    assert all(windows[1].token_to_orig_map[p] == 4 for p in (5, 6, 7))
    assert windows[1].token_is_max_context[5] and not windows[2].token_is_max_context[3]

    def result(start, end):
        return {"start_top_index": np.array([start]), "start_top_log_probs": np.array([0.0]),
                "end_top_index": np.array([[end]]), "end_top_log_probs": np.array([[0.0]])}

    # Decoding maps the three pieces back to the original word, from window 1 only.
    prediction = qa_metrics.predict_question(
        example, windows, [result(0, 0), result(5, 7), result(0, 0), result(0, 0)],
        task.config, v2=False)
    assert prediction.text == "unaffable"
    prediction = qa_metrics.predict_question(
        example, windows, [result(0, 0), result(0, 0), result(3, 5), result(0, 0)],
        task.config, v2=False)
    assert prediction.text == qa_metrics.EMPTY_PREDICTION


def test_unicode_contexts_map_back_to_original_text(tmp_path):
    context = "Café Müller won in Zürich. 首都是東京。 w1\u202fw2"
    task = make_task(tmp_path, files={"train.json": squad_file([{"context": context, "qas": [
        qa("city", "who won", [("Zürich", context.index("Zürich"))]),
        qa("cjk", "what", [("東京", context.index("東京"))]),
        qa("nnbsp", "what", [("w2", context.index("w2"))])]}])})
    city, cjk, nnbsp = task.get_examples("train")
    assert cjk.doc_tokens[cjk.start_position] == "首都是東京。"
    for example, pieces, text in ((city, ["zurich"], "Zürich"), (cjk, ["東", "京"], "東京"),
                                  (nnbsp, ["w2"], "w2")):
        window = task.windows(example, True)[0]
        start, end = window.start_position, window.end_position
        assert window.tokens[start:end + 1] == pieces
        result = {"start_top_index": np.array([start]), "start_top_log_probs": np.array([0.0]),
                  "end_top_index": np.array([[end]]), "end_top_log_probs": np.array([[0.0]])}
        prediction = qa_metrics.predict_question(example, [window], [result], task.config,
                                                 v2=False)
        assert prediction.text == text


def test_unanswerable_questions_and_query_truncation(tmp_path):
    context = "paris is the capital of france ."
    paragraph = {"context": context, "qas": [
        qa("no", "who is the leader of w1 w2 w3 w4 w5 w6 ?", is_impossible=True),
        qa("yes", "what", [("paris", 0)], is_impossible=False)]}
    task = make_task(tmp_path, name="squad", files={"train.json": squad_file([paragraph], "v2.0")},
                     max_query_length=4)
    impossible, answerable = task.get_examples("train")
    assert impossible.is_impossible and impossible.start_position == -1
    assert impossible.gold_answers == [] and answerable.gold_answers == ["paris"]
    window = task.windows(impossible, True)[0]
    assert window.tokens[:6] == ["[CLS]", "who", "is", "the", "leader", "[SEP]"]
    (features,) = task.featurize(impossible, True)
    assert features["squad_is_impossible"] == 1
    assert features["squad_start_positions"] == features["squad_end_positions"] == 0
    (features,) = task.featurize(answerable, True)
    assert features["squad_is_impossible"] == 0 and features["squad_start_positions"] == 3


def test_no_room_for_the_document(tmp_path):
    task = make_task(tmp_path, files={"dev.json": squad_file([{"context": "w1", "qas": [
        qa("q", "w1 w2 w3 w4 w5", [("w1", 0)])]}])}, max_seq_length=8, max_query_length=5)
    with pytest.raises(ValueError, match="leaves no room for the document"):
        task.featurize(task.get_examples("dev")[0], is_training=False)


# -- reading: answers that do not match, schema errors, MRQA ------------------------------------

def test_mismatching_answers_are_counted_and_reported(tmp_path, caplog):
    context = "paris is the capital of france ."
    paragraph = {"context": context, "qas": [
        qa("ok", "what", [("paris", 0)]),
        qa("shifted", "what", [("france", 3)]),  # wrong offset: skipped in training
        qa("past_end", "what", [("france", 400)]),
        qa("second_wrong", "what", [("paris", 0), ("capital", 0)])]}
    task = make_task(tmp_path, files={"train.json": squad_file([paragraph]),
                                      "dev.json": squad_file([paragraph])})
    with caplog.at_level(logging.WARNING):
        train = task.get_examples("train")
        dev = task.get_examples("dev")
    assert [e.qas_id for e in train] == ["ok", "second_wrong"]  # trains on the first answer
    assert [e.qas_id for e in dev] == ["ok", "shifted", "past_end", "second_wrong"]
    assert dev[3].gold_answers == ["paris", "capital"]
    report = task.reports["train"]
    assert (report.answer_mismatches, report.skipped) == (3, 2)
    assert report.mismatch_ids == ["shifted", "past_end", "second_wrong"]
    assert report.skipped_ids == ["shifted", "past_end"]
    assert task.reports["dev"].skipped == 0 and task.reports["dev"].answer_mismatches == 3
    assert "3 question(s) have an answer whose text is not the context" in caplog.text
    assert "skipped 2 training question(s)" in caplog.text


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d.pop("data"), r"train.json: missing key 'data'"),
    (lambda d: d["data"][0].pop("paragraphs"),
     r"data\[0\] \(title 'T'\): missing key 'paragraphs'"),
    (lambda d: d["data"][0]["paragraphs"][1].pop("context"),
     r"data\[0\] \(title 'T'\) paragraphs\[1\]: missing key 'context'"),
    (lambda d: d["data"][0]["paragraphs"][1]["qas"][0].pop("question"),
     r"paragraphs\[1\] qas\[0\] \(id 'q2'\): missing key 'question'"),
    (lambda d: d["data"][0]["paragraphs"][1]["qas"][0].update(answers="paris"),
     r"qas\[0\] \(id 'q2'\): 'answers' must be list, got str \"paris\""),
    (lambda d: d["data"][0]["paragraphs"][1]["qas"][0]["answers"][0].update(answer_start="0"),
     r"qas\[0\] \(id 'q2'\) answers\[0\]: 'answer_start' must be int, got str"),
    (lambda d: d["data"][0]["paragraphs"][1]["qas"][0].update(id=7),
     r"paragraphs\[1\] qas\[0\]: 'id' must be str, got int 7"),
    (lambda d: d["data"][0]["paragraphs"][1]["qas"][0].update(answers=[]),
     r"qas\[0\] \(id 'q2'\): 'answers' is empty"),
    (lambda d: d["data"][0]["paragraphs"][1]["qas"][0].update(id="q1"),
     r"paragraphs\[1\] qas\[0\] \(id 'q1'\): question id 'q1' already used at .*"
     r"paragraphs\[0\] qas\[0\]"),
])
def test_schema_errors_name_the_offending_path(tmp_path, mutate, message):
    data = squad_file([{"context": "paris", "qas": [qa("q1", "what", [("paris", 0)])]},
                       {"context": "paris", "qas": [qa("q2", "what", [("paris", 0)])]}])
    mutate(data)
    task = make_task(tmp_path, files={"train.json": data})
    with pytest.raises(qa_data.QADataError, match=message):
        task.get_examples("train")


def test_invalid_json_and_missing_files(tmp_path):
    task = make_task(tmp_path)
    (tmp_path / "squadv1" / "dev.json").write_text('{"data": [\n  {"title": }]}')
    with pytest.raises(qa_data.QADataError, match=r"dev.json:2:13: invalid JSON"):
        task.get_examples("dev")
    with pytest.raises(task_lib.TaskDataError, match=r"no train.json or train.jsonl"):
        task.get_examples("train")


def test_v2_answerable_question_without_answers_is_an_error(tmp_path):
    data = squad_file([{"context": "paris", "qas": [qa("q1", "what", is_impossible=False)]}],
                      "v2.0")
    task = make_task(tmp_path, name="squad", files={"dev.json": data})
    with pytest.raises(qa_data.QADataError, match=r"is_impossible is false but 'answers'"):
        task.get_examples("dev")


def mrqa_line(qid, context, answer, start, end=None):
    end = start + len(answer) - 1 if end is None else end
    return {"context": context, "qas": [{
        "qid": qid, "question": "what", "answers": [answer, answer.upper()],
        "detected_answers": [{"text": answer, "char_spans": [[start, end]],
                              "token_spans": [[0, 0]]}]}]}


def test_mrqa_jsonl_reading(tmp_path):
    lines = [{"header": {"dataset": "NewsQA", "split": "train"}},
             mrqa_line("m1", "paris is the capital", "capital", 13),
             mrqa_line("m2", "paris is the capital", "paris", 0, end=5)]  # span != text
    task = make_task(tmp_path, name="newsqa", files={"train.jsonl": lines, "dev.jsonl": lines})
    train = task.get_examples("train")
    assert [(e.qas_id, e.orig_answer_text, e.start_position) for e in train] == [
        ("m1", "capital", 3), ("m2", "paris", 0)]
    assert train[0].gold_answers == ["capital", "CAPITAL"]
    assert task.reports["train"].mismatch_ids == ["m2"]
    assert task.is_mrqa and [e.qas_id for e in task.get_examples("dev")] == ["m1", "m2"]


@pytest.mark.parametrize("line, message", [
    ('{"context": "x", "qas": [{"qid": "a", "question": "q", "answers": [3]}]}',
     r"train.jsonl:2 qas\[0\] \(qid 'a'\) answers\[0\]: must be a string, got int 3"),
    ('{"context": "x", "qas": [{"qid": "a", "question": "q", "answers": ["x"], '
     '"detected_answers": [{"text": "x", "char_spans": [[0]]}]}]}',
     r"train.jsonl:2 qas\[0\] \(qid 'a'\) detected_answers\[0\] char_spans\[0\]: expected "
     r"\[start, end\] integers"),
    ('{"qas": []}', r"train.jsonl:2: missing key 'context'"),
    ('{"context": "x", "qas": [', r"train.jsonl:2:\d+: invalid JSON"),
])
def test_mrqa_schema_errors_name_file_line_and_question(tmp_path, line, message):
    task = make_task(tmp_path, name="newsqa")
    (tmp_path / "newsqa" / "train.jsonl").write_text(
        '{"header": {}}\n' + line + "\n", encoding="utf-8")
    with pytest.raises(qa_data.QADataError, match=message):
        task.get_examples("train")
