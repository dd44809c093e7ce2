"""A UTF-8 byte-order mark (Windows editors write one) is dropped by every reader of a user's
text: the file reads exactly as without it (issue 29)."""
import gzip
import json
import os

import pytest

from finetune import prediction
from finetune.qa import qa_data
from finetune.tagging import tagging_tasks
from model import probing
from pretrain.builder import corpus
from util import io_utils, task_spec

BOM = "\ufeff".encode()


def _conll(path):
    return [(s.words, s.tags, s.lines) for s in tagging_tasks.read_conll(path, 0, -1, None)]


def _squad(path):
    return [(c, [q.qas_id for q in qs]) for c, qs in qa_data.iter_squad(path, False, True)]


def _mrqa(path):
    return [(c, [q.qas_id for q in qs]) for c, qs in qa_data.iter_mrqa(path, True)]


def _corpus(path):
    files = corpus.find_input_files(os.path.dirname(path))
    units = corpus.split_into_units(files, 1 << 20, True)
    return [list(d.lines) for u in units for d in corpus.iter_documents(u)]


SQUAD = json.dumps({"data": [{"title": "t", "paragraphs": [{"context": "w1 w2", "qas": [
    {"id": "q1", "question": "w1?", "answers": [{"text": "w2", "answer_start": 3}]}]}]}]})
MRQA = ('{"header": {"dataset": "d"}}\n' + json.dumps(
    {"context": "w1 w2", "qas": [{"qid": "q1", "question": "w1?", "answers": ["w2"],
                                  "detected_answers": [{"text": "w2", "char_spans": [[3, 4]]}]}]})
        + "\n")

READERS = {
    # -DOCSTART- on the first line used to become a word (its tag "O" a training label).
    "conll": ("train.txt", "-DOCSTART- O\n\nw1 B-A\nw2 I-A\n\nw3 O\n", _conll),
    "squad_json": ("train.json", SQUAD, _squad),
    "mrqa_jsonl_gz": ("train.jsonl.gz", MRQA, _mrqa),
    "custom_task_spec": ("spec.json", '{"type": "qa", "train": "t.json"}',
                         lambda p: task_spec.resolve("mine", str(p))),
    "hparams_file": ("hparams.json", '{"learning_rate": 0.1}', io_utils.read_json),
    "predict_input": ("in.txt", "w1 w2\nw3\n", lambda p: list(prediction._lines(str(p)))),
    "probe_conll": ("chunk.txt", "-DOCSTART- -X- O\n\nw1 NN B-NP\n",
                    lambda p: probing.read_conll_column(str(p), 2)),
    "probe_tsv": ("train.tsv", "sentence\tlabel\nw1 w2\t1\n",
                  lambda p: probing.read_sentence_tsv(str(p))),
    "pretraining_corpus": ("a.txt", "w1 w2\n\nw3\n", _corpus),
}


@pytest.mark.parametrize("reader", sorted(READERS))
def test_a_byte_order_mark_is_dropped(reader, tmp_path):
    name, text, read = READERS[reader]
    results = []
    for sub, prefix in (("plain", b""), ("bom", BOM)):
        path = tmp_path / sub / name
        path.parent.mkdir()
        data = prefix + text.encode()
        path.write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
        result = read(str(path))
        results.append(json.loads(json.dumps(result, default=repr).replace(f"/{sub}/", "/")))
    assert results[0] == results[1]
