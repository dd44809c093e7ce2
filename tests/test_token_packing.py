"""The encoder with its padding removed (model/token_packing.py) computes what the padded layout
computes at every real token."""
import numpy as np
import pytest
import tensorflow as tf

from model import layers
from model import modeling
from model import token_packing
from tests.test_modeling import compiled_functions

CONFIG = dict(vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
              intermediate_size=64, embedding_size=16)


def test_plan_packs_real_tokens_in_order_and_unpacks_them_to_their_positions():
    mask = tf.constant([[1, 1, 0, 0], [0, 0, 0, 0], [1, 1, 1, 0]])
    packing = token_packing.plan(mask, num_heads=2, multiple=4)
    # 5 real tokens at flat positions 0, 1, 8, 9, 10; rounded up to 8 rows, fillers point at 12.
    assert packing.rows.numpy().tolist() == [0, 1, 8, 9, 10, 12, 12, 12]
    assert packing.positions.numpy().tolist() == [0, 1, 8, 8, 8, 8, 8, 8, 2, 3, 4, 8]
    x = tf.reshape(tf.range(1, 13, dtype=tf.float32), [12, 1])
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        packed = token_packing.pack(x, packing)
        back = token_packing.unpack(packed, packing)
        weighted = packed * tf.range(1.0, 9.0)[:, tf.newaxis]
    assert packed.numpy()[:, 0].tolist() == [1, 2, 9, 10, 11, 0, 0, 0]
    real = tf.reshape(mask, [-1]).numpy()
    np.testing.assert_array_equal(back.numpy()[:, 0], x.numpy()[:, 0] * real)
    # Gradients are the opposite moves: what reaches padding or a filler row is dropped.
    assert tape.gradient(weighted, x).numpy()[:, 0].tolist() == [
        1, 2, 0, 0, 0, 0, 0, 0, 3, 4, 5, 0]
    np.testing.assert_array_equal(tape.gradient(back, x).numpy()[:, 0], real)
    empty = token_packing.plan(tf.zeros([2, 3], tf.int32), num_heads=1, multiple=4)
    assert empty.rows.numpy().tolist() == [6] * 4  # one block of fillers, never zero rows


def test_heads_layout_equals_the_padded_split_and_merge_of_heads():
    mask = tf.constant([[1, 1, 1, 0], [1, 0, 0, 0]])
    n, d = 2, 3
    packing = token_packing.plan(mask, num_heads=n, multiple=8)
    flat = tf.random.stateless_normal([8, n * d], seed=[1, 2])  # [B*L, H], padded layout
    padded_heads = tf.transpose(tf.reshape(flat, [2, 4, n, d]), [0, 2, 1, 3])
    real = tf.cast(mask, tf.float32)[:, tf.newaxis, :, tf.newaxis]
    with tf.GradientTape(persistent=True) as tape:
        packed = token_packing.pack(flat, packing)
        tape.watch(packed)
        heads = token_packing.to_heads(packed, packing)
        tape.watch(heads)
        merged = token_packing.from_heads(heads, packing)
    np.testing.assert_array_equal(heads.numpy(), (padded_heads * real).numpy())
    np.testing.assert_array_equal(merged.numpy(), packed.numpy())
    np.testing.assert_array_equal(tape.gradient(heads, packed).numpy()[:4], np.ones([4, n * d]))
    np.testing.assert_array_equal(tape.gradient(merged, heads).numpy(),
                                  np.broadcast_to(real.numpy(), heads.shape))


def batch(rows=7, length=20, seed=0):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(2, length, rows)
    mask = (np.arange(length)[None] < lengths[:, None]).astype(np.int32)
    return rng.integers(5, 50, [rows, length]) * mask, mask, mask * rng.integers(0, 2, [rows, 1])


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_real_tokens_get_the_padded_layouts_outputs_and_gradients(dtype):
    """Evaluation and training without dropout: the same outputs at real tokens (zeros at
    padding) and the same gradients, up to float rounding."""
    config = modeling.BertConfig(**CONFIG, hidden_dropout_prob=0.0,
                                 attention_probs_dropout_prob=0.0)
    padded, packed = [modeling.BertModel(config, seed=3, compute_dtype=dtype, remove_padding=r)
                      for r in (False, True)]
    ids, mask, segments = batch()
    real = mask.astype(bool)
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == "float32" else dict(rtol=0.05, atol=0.05)
    for training in (False, True):
        with tf.GradientTape(persistent=True) as tape:
            outs = [m(ids, mask, segments, training=training, seed=tf.constant([1, 2]))
                    for m in (padded, packed)]
            losses = [tf.reduce_sum(tf.cast(o.sequence_output, tf.float32) * mask[..., None])
                      for o in outs]
        (a, b) = [tf.cast(o.sequence_output, tf.float32).numpy() for o in outs]
        np.testing.assert_allclose(b[real], a[real], **tol)
        assert not b[~real].any()  # padding positions hold zeros, not another token's vector
        np.testing.assert_allclose(tf.cast(outs[1].pooled_output, tf.float32).numpy(),
                                   tf.cast(outs[0].pooled_output, tf.float32).numpy(), **tol)
        grads = [tape.gradient(loss, m.trainable_variables)
                 for m, loss in zip((padded, packed), losses)]
        for g_a, g_b in zip(*grads):
            np.testing.assert_allclose(tf.convert_to_tensor(g_b).numpy(),
                                       tf.convert_to_tensor(g_a).numpy(),
                                       rtol=1e-4 if dtype == "float32" else 0.1,
                                       atol=1e-4 if dtype == "float32" else 0.5)


def test_dropout_on_packed_tokens_is_a_function_of_the_seed():
    config = modeling.BertConfig(**CONFIG)
    model = modeling.BertModel(config, seed=3, remove_padding=True)
    ids, mask, segments = batch()
    runs = [model(ids, mask, segments, training=True, seed=tf.constant(s)).sequence_output.numpy()
            for s in ([1, 2], [1, 2], [1, 3])]
    np.testing.assert_array_equal(runs[0], runs[1])
    assert not np.allclose(runs[0], runs[2])


def _compiled_functions(model) -> list:
    """Names of the XLA-compiled functions a traced training step of `model` calls."""
    ids, mask, segments = batch()

    def step():
        with tf.GradientTape() as tape:
            out = model(ids, mask, segments, training=True, seed=tf.constant([1, 2]))
            loss = tf.reduce_sum(tf.cast(out.sequence_output, tf.float32))
        return tape.gradient(loss, model.trainable_variables)

    return compiled_functions(tf.function(step).get_concrete_function())


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_packed_float32_encoder_runs_its_elementwise_blocks_uncompiled(monkeypatch, dtype):
    """Packed, the shapes change with each batch's token count, and XLA would compile the fused
    blocks again for each one: in float32, where graph ops are as fast, the packed encoder runs
    them as graph ops; in bfloat16 (fused blocks faster per step) and in the padded layout (fixed
    shapes in pre-training) they stay compiled."""
    config = modeling.BertConfig(**CONFIG)
    padded, packed = [modeling.BertModel(config, seed=3, remove_padding=r, compute_dtype=dtype)
                      for r in (False, True)]
    monkeypatch.setattr(layers, "MIN_FUSED_ELEMENTS", 0)  # this tiny model's blocks too
    assert any("dropout_add_norm" in name for name in _compiled_functions(padded))
    packed_compiled = _compiled_functions(packed)
    if dtype == "float32":
        assert packed_compiled == []
    else:
        assert any("dropout_add_norm" in name for name in packed_compiled)
