"""Frozen-feature probes: what an encoder's features already hold, measured without fine-tuning.

A linear softmax classifier is fitted on frozen features of a training slice and scored on
held-out data, the standard small-scale measure of a pre-trained encoder (it moves within minutes
of pre-training, long before fine-tuning scores do). Three probes:

- "pos" and "chunk": per-word tags of a CoNLL-2000 file (columns word, POS, chunk tag); a word's
  feature is the encoder output at its first piece. The first `train_size` sentences train the
  probe, the last `test_size` sentences (disjoint) score it.
- "sst": SST-2 sentences (`train.tsv` / `dev.tsv` with a `sentence` and a `label` column); a
  sentence's feature is the mean over its pieces. The first `train_size` training rows train the
  probe, the whole dev file scores it.

Each probe is fitted on two features: the last layer ("last") and the mean of all layers'
outputs ("mean"). The classifier is fitted on whitened features by minibatch Adam for a fixed
number of updates from zero weights in a seeded order (`fit_linear_probe`), so a probe is a
deterministic function of the features. The score is accuracy on the held-out part.
"""
import csv
import dataclasses
import os
from typing import Sequence

import numpy as np
import tensorflow as tf

from model import modeling
from util import fs
from util import preemption

PROBE_TASKS = ("pos", "chunk", "sst")
FEATURES = ("last", "mean")
LENGTH_BUCKET = 16  # FeatureExtractor pads texts to a multiple of this many pieces
CONLL_COLUMNS = {"pos": 1, "chunk": 2}


class ProbeDataError(ValueError):
    """Probe data that cannot be read; the message names the file and line."""


@dataclasses.dataclass
class ProbeTask:
    name: str  # "pos", "chunk" or "sst"
    per_word: bool  # labels per word (tagging) or per text (sentence)
    train_texts: list  # per_word: lists of words; else strings
    train_labels: list  # per_word: lists of tags; else labels
    test_texts: list
    test_labels: list


def read_conll_column(path: str, column: int) -> list[tuple[list[str], list[str]]]:
    """(words, tags) per sentence of a CoNLL file; tags from `column` (0-based, whitespace split)."""
    sentences, words, tags = [], [], []
    try:
        with fs.open(path, encoding="utf-8-sig") as f:
            for line_no, line in enumerate(f, start=1):
                fields = line.split()
                if not fields:
                    if words:
                        sentences.append((words, tags))
                    words, tags = [], []
                    continue
                if fields[0] == "-DOCSTART-":
                    continue
                if len(fields) <= column:
                    raise ProbeDataError(f"{path}:{line_no}: {len(fields)} columns, the probe "
                                         f"reads column {column + 1} (word POS chunk)")
                words.append(fields[0])
                tags.append(fields[column])
    except (OSError, UnicodeDecodeError) as e:
        raise ProbeDataError(f"{path}: cannot read the CoNLL file ({e})") from None
    if words:
        sentences.append((words, tags))
    if not sentences:
        raise ProbeDataError(f"{path}: no sentences")
    return sentences


def read_sentence_tsv(path: str) -> tuple[list[str], list[str]]:
    """(sentences, labels) of an SST-2 style TSV with a header naming `sentence` and `label`."""
    try:
        with fs.open(path, encoding="utf-8-sig", newline="") as f:
            rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    except (OSError, UnicodeDecodeError) as e:
        raise ProbeDataError(f"{path}: cannot read the TSV file ({e})") from None
    if not rows or "sentence" not in rows[0] or "label" not in rows[0]:
        raise ProbeDataError(f"{path}:1: the header must name a 'sentence' and a 'label' column")
    text_col, label_col = rows[0].index("sentence"), rows[0].index("label")
    texts, labels = [], []
    for line_no, row in enumerate(rows[1:], start=2):
        if len(row) <= max(text_col, label_col):
            raise ProbeDataError(f"{path}:{line_no}: {len(row)} columns, expected at least "
                                 f"{max(text_col, label_col) + 1}")
        texts.append(row[text_col])
        labels.append(row[label_col].strip())
    if not texts:
        raise ProbeDataError(f"{path}: no rows after the header")
    return texts, labels


def load_task(name: str, path: str, train_size: int = 2000, test_size: int = 1000) -> ProbeTask:
    """The probe `name` on its data: a CoNLL-2000 file for pos/chunk, an SST-2 dir for sst."""
    if name in CONLL_COLUMNS:
        sentences = read_conll_column(path, CONLL_COLUMNS[name])
        if len(sentences) < 2:
            raise ProbeDataError(f"{path}: {len(sentences)} sentence(s); a probe needs a train "
                                 "and a held-out part")
        test_size = min(test_size, len(sentences) // 2)
        train = sentences[:min(train_size, len(sentences) - test_size)]
        test = sentences[len(sentences) - test_size:]
        return ProbeTask(name, True, [w for w, _ in train], [t for _, t in train],
                         [w for w, _ in test], [t for _, t in test])
    if name == "sst":
        if not fs.isdir(path):
            raise ProbeDataError(f"probe 'sst' needs the SST-2 directory (train.tsv, dev.tsv), "
                                 f"got {path}")
        train_texts, train_labels = read_sentence_tsv(os.path.join(path, "train.tsv"))
        test_texts, test_labels = read_sentence_tsv(os.path.join(path, "dev.tsv"))
        return ProbeTask(name, False, train_texts[:train_size], train_labels[:train_size],
                         test_texts, test_labels)
    raise ProbeDataError(f"unknown probe task {name!r}; expected one of {list(PROBE_TASKS)}")


# -- features ------------------------------------------------------------------------------------


class FeatureExtractor:
    """Frozen features of an encoder (a modeling.BertModel) for words and sentences."""

    def __init__(self, encoder: modeling.BertModel, tokenizer, max_seq_length: int = 128,
                 batch_size: int = 64):
        self.encoder = encoder
        self.tokenizer = tokenizer
        self.max_seq_length = min(max_seq_length, encoder.config.max_position_embeddings)
        self.batch_size = batch_size
        # One trace for every batch length (and every evaluation that reuses this extractor).
        ids_spec = tf.TensorSpec([None, None], tf.int32)
        self._forward = tf.function(self._layers, input_signature=[ids_spec, ids_spec],
                                    autograph=False)

    def _layers(self, ids, mask):
        out = self.encoder(ids, mask, tf.zeros_like(ids), training=False)
        layers = [tf.cast(x, tf.float32) for x in out.all_layer_outputs]
        return layers[-1], tf.add_n(layers) / len(layers)

    def _encode(self, sequences: list[list[int]]):
        """Yields (indices, last, mean, mask) per batch of `batch_size` rows (the last one
        filled with empty rows); sequences sorted by length to pad little, and padded to a
        multiple of LENGTH_BUCKET pieces: the encoder's fused blocks are compiled by XLA once per
        input shape (model/layers.py), about a second each on a CPU, which cost more than the
        forward passes when every batch had its own length."""
        order = sorted(range(len(sequences)), key=lambda i: len(sequences[i]))
        for start in range(0, len(order), self.batch_size):
            preemption.check("the probes' feature extraction", "re-run the same command to "
                             "evaluate")
            chunk = order[start:start + self.batch_size]
            longest = max(len(sequences[i]) for i in chunk)
            length = min(-(-longest // LENGTH_BUCKET) * LENGTH_BUCKET,
                         self.max_seq_length)
            ids = np.full([self.batch_size, length], self.tokenizer.pad_id, np.int32)
            mask = np.zeros([self.batch_size, length], np.int32)
            for row, i in enumerate(chunk):
                ids[row, :len(sequences[i])] = sequences[i]
                mask[row, :len(sequences[i])] = 1
            last, mean = self._forward(tf.constant(ids), tf.constant(mask))
            rows = len(chunk)
            yield chunk, last.numpy()[:rows], mean.numpy()[:rows], mask[:rows]

    def word_features(self, sentences: Sequence[Sequence[str]]):
        """Features at each word's first piece: (last [n, H], mean [n, H], kept [n] bool) over
        all words of all sentences in order; words cut by max_seq_length are not kept."""
        tok = self.tokenizer
        sequences, firsts = [], []
        for words in sentences:
            ids, first = [tok.cls_id], []
            for word in words:
                pieces = tok.encode(word) or [tok.unk_id]
                first.append(len(ids) if len(ids) + len(pieces) < self.max_seq_length else -1)
                ids.extend(pieces)
            sequences.append(ids[:self.max_seq_length - 1] + [tok.sep_id])
            firsts.append(first)
        hidden = self.encoder.config.hidden_size
        offsets = np.cumsum([0] + [len(f) for f in firsts])
        last = np.zeros([offsets[-1], hidden], np.float32)
        mean = np.zeros_like(last)
        kept = np.zeros([offsets[-1]], bool)
        for chunk, batch_last, batch_mean, _ in self._encode(sequences):
            for row, i in enumerate(chunk):
                positions = np.array(firsts[i])
                ok = positions >= 0
                rows = offsets[i] + np.flatnonzero(ok)
                last[rows] = batch_last[row, positions[ok]]
                mean[rows] = batch_mean[row, positions[ok]]
                kept[rows] = True
        return last, mean, kept

    def sentence_features(self, texts: Sequence[str]):
        """Mean over each text's pieces ([CLS] and [SEP] included): (last [n, H], mean [n, H])."""
        tok = self.tokenizer
        sequences = [[tok.cls_id] + tok.encode(t)[:self.max_seq_length - 2] + [tok.sep_id]
                     for t in texts]
        hidden = self.encoder.config.hidden_size
        last = np.zeros([len(texts), hidden], np.float32)
        mean = np.zeros_like(last)
        for chunk, batch_last, batch_mean, mask in self._encode(sequences):
            weights = mask[..., None].astype(np.float32)
            counts = weights.sum(1)
            last[chunk] = (batch_last * weights).sum(1) / counts
            mean[chunk] = (batch_mean * weights).sum(1) / counts
        return last, mean


# -- the linear probe ----------------------------------------------------------------------------


def fit_linear_probe(x_train: np.ndarray, y_train: np.ndarray, x_test: np.ndarray,
                     y_test: np.ndarray, num_classes: int, updates: int = 1000,
                     batch_size: int = 512, learning_rate: float = 0.1,
                     l2: float = 1e-4) -> float:
    """Held-out accuracy of a softmax classifier fitted on whitened `x_train`.

    Features are whitened with the training rows' mean and covariance: a linear probe on them is
    the same family of classifiers, but the problem becomes well conditioned, so minibatch Adam
    (`updates` steps, the rate decaying linearly to 0, an L2 penalty `l2`) converges in about a
    second where standardised features needed thousands of full-batch steps. Weights start at
    zero and the minibatch order is seeded: a probe is a deterministic function of its inputs.
    """
    mu = x_train.mean(0)
    eigenvalues, eigenvectors = np.linalg.eigh(np.cov(x_train - mu, rowvar=False))
    whiten = eigenvectors / np.sqrt(np.maximum(eigenvalues, 0.0) + 1e-5 * eigenvalues.max())
    xs = tf.constant((x_train - mu) @ whiten, tf.float32)
    xt = tf.constant((x_test - mu) @ whiten, tf.float32)
    ys = tf.constant(y_train, tf.int32)
    batch_size = min(batch_size, len(y_train))
    rng = np.random.RandomState(0)
    per_epoch = len(y_train) // batch_size
    epochs = -(-updates // per_epoch)
    order = np.concatenate([rng.permutation(len(y_train))[:per_epoch * batch_size]
                            for _ in range(epochs)])
    batches = tf.constant(order[:updates * batch_size].reshape(updates, batch_size), tf.int32)
    w, b = _fit(xs, ys, batches, tf.constant(num_classes), tf.constant(learning_rate, tf.float32),
                tf.constant(l2, tf.float32))
    predicted = tf.argmax(tf.matmul(xt, w) + b, -1).numpy()
    return float((predicted == y_test).mean())


# Adam with bias correction (the probe's own optimizer).
_BETA1, _BETA2, _EPSILON = 0.9, 0.999, 1e-8


@tf.function(input_signature=[tf.TensorSpec([None, None], tf.float32),
                              tf.TensorSpec([None], tf.int32),
                              tf.TensorSpec([None, None], tf.int32),
                              tf.TensorSpec([], tf.int32), tf.TensorSpec([], tf.float32),
                              tf.TensorSpec([], tf.float32)], autograph=False)
def _fit(xs, ys, batches, num_classes, learning_rate, l2):
    """Weights and bias of the probe after one Adam update per row of `batches` (row indices),
    from zeros; the rate decays linearly to 0. Traced once per process: every probe, task and
    evaluation of a run has another feature width, class count or row count, all dimensions
    left open here."""
    updates = tf.shape(batches)[0]
    w = tf.zeros([tf.shape(xs)[1], num_classes])
    b = tf.zeros([num_classes])

    def body(i, params, m, v):
        rows = batches[i]
        x, y = tf.gather(xs, rows), tf.gather(ys, rows)
        with tf.GradientTape() as tape:
            tape.watch(params)
            logits = tf.matmul(x, params[0]) + params[1]
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(y, logits))
            loss += 0.5 * l2 * tf.reduce_sum(params[0] * params[0])
        grads = tape.gradient(loss, params)
        rate = learning_rate * (1.0 - tf.cast(i, tf.float32) / tf.cast(updates, tf.float32))
        t = tf.cast(i + 1, tf.float32)
        scale = rate * tf.sqrt(1 - _BETA2 ** t) / (1 - _BETA1 ** t)
        m = [_BETA1 * mi + (1 - _BETA1) * g for mi, g in zip(m, grads)]
        v = [_BETA2 * vi + (1 - _BETA2) * g * g for vi, g in zip(v, grads)]
        params = [p - scale * mi / (tf.sqrt(vi) + _EPSILON) for p, mi, vi in zip(params, m, v)]
        return i + 1, params, m, v

    zeros = [tf.zeros_like(w), tf.zeros_like(b)]
    _, params, _, _ = tf.while_loop(lambda i, *_: i < updates, body,
                                    (tf.constant(0), [w, b], zeros, list(zeros)))
    return params[0], params[1]


def _label_ids(train_labels: list, test_labels: list) -> tuple[np.ndarray, np.ndarray, int]:
    """Integer labels; the label set is the training slice's (held-out labels not in it count
    as errors: they get id -1)."""
    names = sorted(set(train_labels))
    index = {name: i for i, name in enumerate(names)}
    return (np.array([index[x] for x in train_labels]),
            np.array([index.get(x, -1) for x in test_labels]), len(names))


def run_probes(extractor: FeatureExtractor, tasks: Sequence[ProbeTask],
               updates: int = 1000) -> dict[str, float]:
    """{"<task>/<feature>": held-out accuracy} for every task and feature (last, mean)."""
    results = {}
    word_cache: dict[tuple, tuple] = {}
    for task in tasks:
        if task.per_word:
            # pos and chunk read the same sentences: extract their features once.
            cache_key = (tuple(" ".join(w) for w in task.train_texts),
                         tuple(" ".join(w) for w in task.test_texts))
            if cache_key not in word_cache:
                word_cache[cache_key] = (extractor.word_features(task.train_texts),
                                         extractor.word_features(task.test_texts))
            (tr_last, tr_mean, tr_kept), (te_last, te_mean, te_kept) = word_cache[cache_key]
            train_y = [t for tags in task.train_labels for t in tags]
            test_y = [t for tags in task.test_labels for t in tags]
            y_train, y_test, n = _label_ids(train_y, test_y)
            # A held-out word cut by max_seq_length counts as an error (not silently skipped).
            for feature, x_train, x_test in (("last", tr_last, te_last),
                                             ("mean", tr_mean, te_mean)):
                preemption.check(f"the {task.name} probe", "re-run the same command to evaluate")
                accuracy = fit_linear_probe(x_train[tr_kept], y_train[tr_kept],
                                            x_test[te_kept], y_test[te_kept], n, updates)
                results[f"{task.name}/{feature}"] = accuracy * te_kept.mean()
        else:
            tr_last, tr_mean = extractor.sentence_features(task.train_texts)
            te_last, te_mean = extractor.sentence_features(task.test_texts)
            y_train, y_test, n = _label_ids(task.train_labels, task.test_labels)
            for feature, x_train, x_test in (("last", tr_last, te_last),
                                             ("mean", tr_mean, te_mean)):
                preemption.check(f"the {task.name} probe", "re-run the same command to evaluate")
                results[f"{task.name}/{feature}"] = fit_linear_probe(
                    x_train, y_train, x_test, y_test, n, updates)
    return results
