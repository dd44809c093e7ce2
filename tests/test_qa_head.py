"""The QA head: official variable names, the joint start/end math, beam outputs and losses."""
import math

import numpy as np
import pytest
import tensorflow as tf

from finetune.qa import qa_head
from model import modeling
from util import checkpoint

H, L, B = 8, 12, 3


def bert_config():
    return modeling.BertConfig(vocab_size=10, hidden_size=H, num_hidden_layers=1,
                               num_attention_heads=2, intermediate_size=16,
                               max_position_embeddings=L)


def make_head(**kwargs):
    values = dict(beam_size=4, joint_prediction=True, answerable_classifier=True,
                  answerable_uses_start_logits=True, answerable_weight=0.5, seed=3)
    values.update(kwargs)
    return qa_head.QAHead("squad", bert_config(), **values)


def inputs(seed=0):
    rng = np.random.default_rng(seed)
    hidden = rng.normal(size=(B, L, H)).astype(np.float32)
    # [CLS] q q [SEP] doc... [SEP] pad: question 1-2, document 4 .. n-2, final [SEP] n-1.
    lengths = [12, 9, 6]
    input_mask = np.array([[1] * n + [0] * (L - n) for n in lengths], np.int32)
    segment_ids = np.array([[0] * 4 + [1] * (n - 4) + [0] * (L - n) for n in lengths], np.int32)
    features = {"input_mask": tf.constant(input_mask), "segment_ids": tf.constant(segment_ids),
                "squad_start_positions": tf.constant([5, 0, 4]),
                "squad_end_positions": tf.constant([7, 0, 5]),
                "squad_is_impossible": tf.constant([0, 1, 0]),
                "squad_eid": tf.constant([0, 1000, 1001])}
    encoder = modeling.EncoderOutput(tf.constant(hidden), tf.constant(hidden[:, 0]), [], None)
    allowed = input_mask * segment_ids
    allowed[:, 0] = 1
    return encoder, features, hidden, allowed


def gelu(x):
    erf = np.vectorize(math.erf)
    return 0.5 * x * (1.0 + erf(x / np.sqrt(2.0)))


def log_softmax(x):
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def weights(head):
    return {name.split("/", 2)[2]: v.numpy() for name, v in
            checkpoint.by_name(head.variables).items()}


def reference_logits(head, hidden, allowed, starts):
    """Numpy XLNet head on the concatenation [h_start ; h_end]: start logits [B, L] and end
    logits [B, K, L] for the start positions `starts` [B, K]."""
    w = weights(head)
    penalty = 1000.0 * (allowed - 1.0)
    start_logits = (hidden @ w["dense/kernel"])[..., 0] + w["dense/bias"][0] + penalty
    ends = []
    for b in range(B):
        rows = []
        for s in starts[b]:
            concat = np.concatenate([np.repeat(hidden[b, s][None], L, 0), hidden[b]], -1)
            x = gelu(concat @ w["qa_hidden/kernel"] + w["qa_hidden/bias"])
            rows.append((x @ w["dense_1/kernel"])[:, 0] + w["dense_1/bias"][0] + penalty[b])
        ends.append(rows)
    return start_logits, np.array(ends)


@pytest.mark.parametrize("kwargs, expected", [
    ({}, {"dense/kernel": [H, 1], "qa_hidden/kernel": [2 * H, 512], "dense_1/kernel": [512, 1],
          "dense_2/kernel": [2 * H, 512], "dense_3/kernel": [512, 1]}),
    ({"joint_prediction": False, "answerable_uses_start_logits": False},
     {"dense/kernel": [H, 1], "dense_1/kernel": [H, 1], "dense_2/kernel": [H, 1]}),
    ({"answerable_classifier": False},
     {"dense/kernel": [H, 1], "qa_hidden/kernel": [2 * H, 512], "dense_1/kernel": [512, 1]}),
])
def test_variable_names_follow_the_official_layers(kwargs, expected):
    names = {n: list(v.shape) for n, v in checkpoint.by_name(make_head(**kwargs).variables).items()}
    kernels = {n: s for n, s in names.items() if n.endswith("/kernel")}
    assert kernels == {f"task_specific/squad/{k}": v for k, v in expected.items()}
    assert len(names) == 2 * len(expected)  # a bias per kernel


def test_training_end_logits_use_the_gold_start_and_the_loss_is_official():
    head = make_head()
    encoder, features, hidden, allowed = inputs()
    losses, outputs = head(encoder, features, training=True, seeds=None, percent_done=0.0)
    gold_starts = features["squad_start_positions"].numpy()[:, None]
    start_ref, end_ref = reference_logits(head, hidden, allowed, gold_starts)
    np.testing.assert_allclose(outputs["start_logits"].numpy(), start_ref, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(outputs["end_logits"].numpy(), end_ref[:, 0], rtol=1e-5,
                               atol=1e-4)

    w = weights(head)
    start_nll = -log_softmax(start_ref)[np.arange(B), gold_starts[:, 0]]
    ends = features["squad_end_positions"].numpy()
    end_nll = -log_softmax(end_ref[:, 0])[np.arange(B), ends]
    p = np.exp(log_softmax(start_ref))
    summary = np.concatenate([hidden[:, 0], np.einsum("bl,blh->bh", p, hidden)], -1)
    logit = (gelu(summary @ w["dense_2/kernel"] + w["dense_2/bias"]) @ w["dense_3/kernel"]
             )[:, 0] + w["dense_3/bias"][0]
    labels = features["squad_is_impossible"].numpy()
    xent = np.maximum(logit, 0) - logit * labels + np.log1p(np.exp(-np.abs(logit)))
    np.testing.assert_allclose(outputs["answerable_logit"].numpy(), logit, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(losses.numpy(), (start_nll + end_nll) / 2 + 0.5 * xent,
                               rtol=1e-5, atol=1e-5)


def test_inference_beam_matches_the_reference_and_respects_the_mask():
    head = make_head()
    encoder, features, hidden, allowed = inputs(1)
    _, outputs = head(encoder, features, training=False, seeds=None, percent_done=0.0)
    start_index = outputs["start_top_index"].numpy()
    start_ref, end_ref = reference_logits(head, hidden, allowed, start_index)
    start_lp = log_softmax(start_ref)
    np.testing.assert_allclose(outputs["start_top_log_probs"].numpy(),
                               np.take_along_axis(start_lp, start_index, 1), rtol=1e-5, atol=1e-5)
    assert np.all(np.diff(outputs["start_top_log_probs"].numpy(), axis=1) <= 0)
    # Row 2 allows only [CLS], piece 4 and the final [SEP] 5: the beam's best three are those,
    # its fourth entry a masked position with log-probability about -1000.
    assert set(start_index[2, :3]) == {0, 4, 5}
    assert outputs["start_top_log_probs"].numpy()[2, 3] < -900
    end_index = outputs["end_top_index"].numpy()  # [B, K, K]
    end_lp = log_softmax(end_ref)  # [B, K, L]
    np.testing.assert_allclose(outputs["end_top_log_probs"].numpy(),
                               np.take_along_axis(end_lp, end_index, 2), rtol=1e-5, atol=1e-4)
    assert np.all(allowed[0][end_index[0]] == 1)  # row 0: the beam stays on allowed positions
    assert not outputs["end_logits"].numpy().any()  # the official head outputs zeros here
    assert outputs["eid"].numpy().tolist() == [0, 1000, 1001]


def test_beam_larger_than_sequence_and_non_joint_head():
    head = make_head(beam_size=50)
    encoder, features, *_ = inputs()
    _, outputs = head(encoder, features, training=False, seeds=None, percent_done=0.0)
    assert outputs["start_top_index"].shape == (B, L)
    assert outputs["end_top_index"].shape == (B, L, L)

    head = make_head(joint_prediction=False, answerable_classifier=False)
    encoder, features, hidden, allowed = inputs()
    losses, outputs = head(encoder, features, training=False, seeds=None, percent_done=0.0)
    w = weights(head)
    end_ref = (hidden @ w["dense_1/kernel"])[..., 0] + w["dense_1/bias"][0] + 1000.0 * (
        allowed - 1.0)
    np.testing.assert_allclose(outputs["end_logits"].numpy(), end_ref, rtol=1e-5, atol=1e-4)
    assert not outputs["answerable_logit"].numpy().any()
    assert np.isfinite(losses.numpy()).all()


def test_every_head_variable_gets_a_gradient_in_training():
    head = make_head()
    encoder, features, *_ = inputs()
    with tf.GradientTape() as tape:
        losses, _ = head(encoder, features, training=True, seeds=None, percent_done=0.0)
        loss = tf.reduce_sum(losses)
    variables = checkpoint.by_name(head.trainable_variables)
    grads = dict(zip(variables, tape.gradient(loss, list(variables.values()))))
    assert all(g is not None and np.isfinite(g.numpy()).all() for g in grads.values())
    # Biases of the start and end logits shift every position equally: softmax ignores them.
    zero = {n for n, g in grads.items() if np.abs(g.numpy()).sum() < 1e-5}
    assert zero == {"task_specific/squad/dense/bias", "task_specific/squad/dense_1/bias"}
