"""Tiny pre-training data and configs for the pre-training tests (no shared data needed).

The corpus is a learnable toy language: each sentence walks a fixed random successor table over
the word ids with a little noise, so a masked LM can learn it within a few hundred steps.
"""
import json
import os

import numpy as np

from pretrain import pretrain_data

SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
PAD, UNK, CLS, SEP, MASK = range(5)
NUM_WORDS = 27
VOCAB_SIZE = len(SPECIAL) + NUM_WORDS
SEQ_LEN = 16


def write_vocab(path: str) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(SPECIAL + [f"w{i}" for i in range(NUM_WORDS)]) + "\n")


def make_example(rng: np.random.RandomState, successor: np.ndarray, seq_len: int = SEQ_LEN):
    """[CLS] A [SEP] B [SEP] + padding, of random length; A and B follow the successor table."""
    length = rng.randint(6, seq_len + 1)
    body = length - 3
    first = rng.randint(1, body)
    words = [rng.randint(NUM_WORDS)]
    for _ in range(body - 1):
        nxt = successor[words[-1]] if rng.rand() < 0.9 else rng.randint(NUM_WORDS)
        words.append(int(nxt))
    ids = [CLS] + [w + len(SPECIAL) for w in words[:first]] + [SEP] + \
          [w + len(SPECIAL) for w in words[first:]] + [SEP]
    segments = [0] * (first + 2) + [1] * (body - first + 1)
    pad = seq_len - len(ids)
    return ids + [PAD] * pad, [1] * len(ids) + [0] * pad, segments + [0] * pad


def make_repetitive_example(rng: np.random.RandomState, word: int = 0, share: float = 0.95,
                            seq_len: int = SEQ_LEN):
    """A full-length [CLS] A [SEP] B [SEP] whose words are nearly all w`word` (`share` of them),
    as a corpus of repeated boilerplate: a masked LM learns it within a few dozen steps."""
    body = seq_len - 3
    first = body // 2
    words = [word if rng.rand() < share else rng.randint(NUM_WORDS) for _ in range(body)]
    ids = [CLS] + [w + len(SPECIAL) for w in words[:first]] + [SEP] + \
          [w + len(SPECIAL) for w in words[first:]] + [SEP]
    return ids, [1] * seq_len, [0] * (first + 2) + [1] * (body - first + 1)


def write_data(data_dir: str, num_files: int = 4, per_file: int = 48, eval_files: int = 1,
               seed: int = 0, repetitive: bool = False, repeated_word: int = 0) -> str:
    """data_dir/{vocab.txt, pretrain_tfrecords/pretrain_data.tfrecord-i-of-n, metadata.json};
    the toy language, or with `repetitive` text nearly all of one word (`repeated_word`)."""
    rng = np.random.RandomState(seed)
    successor = rng.permutation(NUM_WORDS)
    os.makedirs(os.path.join(data_dir, "pretrain_tfrecords"), exist_ok=True)
    write_vocab(os.path.join(data_dir, "vocab.txt"))
    names = [pretrain_data.shard_name(i, num_files) for i in range(num_files)]
    for name in names:
        records = [pretrain_data.serialize_example(
            *(make_repetitive_example(rng, repeated_word) if repetitive
              else make_example(rng, successor)))
            for _ in range(per_file)]
        pretrain_data.write_examples(os.path.join(data_dir, "pretrain_tfrecords", name), records)
    metadata = {"format_version": pretrain_data.FORMAT_VERSION, "num_out_files": num_files,
                "eval_files": names[num_files - eval_files:], "max_seq_length": SEQ_LEN}
    with open(os.path.join(data_dir, "pretrain_tfrecords", "metadata.json"), "w") as f:
        json.dump(metadata, f)
    return data_dir


def tiny_hparams(**overrides) -> dict:
    """A tiny ELECTRA (hidden 32, 2 layers, generator hidden 16) with a short-run optimizer."""
    hparams = dict(
        vocab_size=VOCAB_SIZE, embedding_size=16, max_seq_length=SEQ_LEN,
        model_hparam_overrides=dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                    intermediate_size=64, max_position_embeddings=32),
        generator_hidden_size=0.5, train_batch_size=8, eval_batch_size=8,
        learning_rate=2e-3, num_warmup_steps=5, adam_bias_correction=True,
        lr_decay_after_warmup=True, num_train_steps=10, save_checkpoints_steps=5,
        iterations_per_loop=5, num_eval_steps=2, keep_checkpoint_max=3, seed=1)
    hparams.update(overrides)
    return hparams
