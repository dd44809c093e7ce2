"""score_text.py on a tiny model pre-trained in the test: hand-replaced tokens are flagged, the
--corrupt / --generator / --json outputs are consistent, errors are clear.

200 steps (~15 s) do not teach a 2-layer model the toy language's word order (bigram violations
stay near chance), but they do teach the discriminator which words real text never uses: the
generator proposes them early on and they are always labelled replaced. So the corpus uses half
the vocabulary and the hand replacements come from the other half.
"""
import json
import os

import numpy as np
import pytest

import pretrain_fixtures as fx
import run_pretraining
import score_text
from configure_pretraining import PretrainingConfig
from model import model_dir as model_dir_lib
from pretrain import pretrain_data

STEPS = 200
# The corpus uses the first KNOWN words of the vocabulary only; the test's replacements come
# from the rest, words the discriminator has only ever seen as (generator) replacements.
KNOWN = 13
SUCCESSOR = np.random.RandomState(7).permutation(KNOWN)


def chain(rng, length: int) -> list[int]:
    """Word indices following the successor table (the toy language, without noise)."""
    words = [rng.randint(KNOWN)]
    for _ in range(length - 1):
        words.append(int(SUCCESSOR[words[-1]]))
    return words


def text_of(words) -> str:
    return " ".join(f"w{w}" for w in words)


def write_corpus(data_dir: str, n: int = 256) -> None:
    """Noise-free toy-language examples [CLS] A [SEP] B [SEP] (+ the fixture's vocab layout)."""
    fx.write_data(data_dir, num_files=2, per_file=4, eval_files=1)  # vocab, metadata, eval shard
    rng = np.random.RandomState(1)
    records = []
    for _ in range(n):
        body = rng.randint(7, fx.SEQ_LEN - 2)
        words = [w + len(fx.SPECIAL) for w in chain(rng, body)]
        first = rng.randint(1, body)
        ids = [fx.CLS] + words[:first] + [fx.SEP] + words[first:] + [fx.SEP]
        segments = [0] * (first + 2) + [1] * (body - first + 1)
        pad = fx.SEQ_LEN - len(ids)
        records.append(pretrain_data.serialize_example(ids + [fx.PAD] * pad,
                                                       [1] * len(ids) + [0] * pad,
                                                       segments + [0] * pad))
    pretrain_data.write_examples(os.path.join(data_dir, "pretrain_tfrecords",
                                              pretrain_data.shard_name(0, 2)), records)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    data_dir = str(tmp_path_factory.mktemp("data"))
    write_corpus(data_dir)
    hparams = fx.tiny_hparams(num_train_steps=STEPS, save_checkpoints_steps=STEPS,
                              iterations_per_loop=100, num_warmup_steps=10, learning_rate=5e-3,
                              train_batch_size=16)
    config = PretrainingConfig.from_hparams("tiny", data_dir, hparams)
    run_pretraining.train_or_eval(config)
    return config.model_dir


def test_hand_replaced_tokens_score_higher(model_dir):
    rng = np.random.RandomState(5)
    texts, replaced = [], []
    for _ in range(40):
        words = chain(rng, 10)
        flags = np.zeros(10, bool)
        for p in rng.choice(np.arange(1, 10), 2, replace=False):  # keep the first word
            words[p], flags[p] = rng.randint(KNOWN, fx.NUM_WORDS), True
        texts.append(text_of(words))
        replaced.append(flags)
    results = score_text.score(model_dir_lib.read_model_dir(model_dir), texts)
    probs = np.array([r["replaced_prob"][1:-1] for r in results])  # without [CLS], [SEP]
    flags = np.array(replaced)
    assert [r["tokens"][1:-1] for r in results] == [t.split() for t in texts]
    hit, untouched = probs[flags], probs[~flags]
    # Replaced tokens look replaced more often than untouched ones, by a wide margin.
    assert hit.mean() > untouched.mean() + 0.1, (hit.mean(), untouched.mean())
    assert (hit[:, None] > untouched[None, :]).mean() > 0.7  # AUC


def test_corrupt_generator_and_json(model_dir, capsys):
    rng = np.random.RandomState(9)
    texts = [text_of(chain(rng, 12)) for _ in range(3)]
    args = ["--model-dir", model_dir, "--json", "--corrupt", "--generator", "--seed", "4"] + texts
    assert score_text.main(args) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 3
    for text, line in zip(texts, lines):
        r = json.loads(line)
        n = len(text.split()) + 2
        assert {len(r[k]) for k in ("tokens", "input_ids", "disc_logits", "replaced_prob",
                                     "original_ids", "replaced")} == {n}
        assert r["original_tokens"] == ["[CLS]"] + text.split() + ["[SEP]"]
        changed = [int(a != b) for a, b in zip(r["input_ids"], r["original_ids"])]
        assert r["replaced"] == changed  # replaced means: differs from the original
        assert set(np.flatnonzero(changed)) <= set(r["masked_positions"])
        # 15% of 14 tokens -> 2 predictions, each a vocabulary-sized row of logits.
        assert len(r["masked_positions"]) == 2
        assert np.array(r["generator_logits"]).shape == (2, fx.VOCAB_SIZE)
        np.testing.assert_allclose(r["replaced_prob"],
                                   1 / (1 + np.exp(-np.array(r["disc_logits"]))), rtol=1e-6)
    # Same seed, same corruption.
    assert score_text.main(args) == 0
    assert capsys.readouterr().out.strip().splitlines() == lines


def test_mask_token_and_table_output(model_dir, capsys):
    md = model_dir_lib.read_model_dir(model_dir)
    [r] = score_text.score(md, ["w1 [MASK] w3"], generator=True)
    assert r["tokens"] == ["[CLS]", "w1", "[MASK]", "w3", "[SEP]"]
    assert r["masked_positions"] == [2] and len(r["generator_logits"]) == 1
    assert score_text.main(["--model-dir", model_dir, "w1 w2 w3"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# w1 w2 w3\n") and "p(replaced)" in out and "\nw2 " in out


def test_errors_are_clear(model_dir, tmp_path, caplog):
    assert score_text.main(["--model-dir", str(tmp_path / "nowhere"), "text"]) == 2
    assert "does not exist" in caplog.text
    assert score_text.main(["--model-dir", model_dir, "--generator", "w1 w2"]) == 2
    assert "has none" in caplog.text
    assert score_text.main(["--model-dir", model_dir, "--vocab-file",
                            str(tmp_path / "v.txt"), "w1"]) == 2
    assert "v.txt does not exist" in caplog.text
