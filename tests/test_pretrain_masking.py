"""Dynamic masking, gathers/scatters, Gumbel sampling and the example-aligned RNG."""
import numpy as np
import pytest
import tensorflow as tf

from model import layers
from pretrain import masking
from pretrain import rng as rng_lib

SPECIAL = masking.SpecialIds(pad=0, cls=2, sep=3, mask=4)


def _rng(step=0, offset=0, seed=7):
    return rng_lib.ExampleRng(seed, tf.constant(step, tf.int64), offset)


def test_rng_rows_follow_the_global_example_index():
    full = _rng(step=3).uniform([6, 7], rng_lib.GUMBEL).numpy()
    for offset in (1, 2, 5):  # 7 * offset is not a multiple of 4: slices start mid-block
        part = _rng(step=3, offset=offset).uniform([6 - offset, 7], rng_lib.GUMBEL).numpy()
        np.testing.assert_array_equal(part, full[offset:])
    shifted = _rng(step=3, offset=2).shifted(1).uniform([3, 7], rng_lib.GUMBEL).numpy()
    np.testing.assert_array_equal(shifted, full[3:])
    other_step = _rng(step=4).uniform([6, 7], rng_lib.GUMBEL).numpy()
    other_purpose = _rng(step=3).uniform([6, 7], rng_lib.MASK_POSITIONS).numpy()
    assert not np.allclose(full, other_step) and not np.allclose(full, other_purpose)
    assert 0.0 <= full.min() and full.max() < 1.0


def test_uniforms_are_the_cpu_kernels_and_xla_draws_the_same():
    # The floats are made from Philox bits as TensorFlow's CPU kernel makes them (XLA's own
    # kernel takes other bits of the same numbers), so graph mode and XLA draw identical noise.
    key, counter = tf.constant([5], tf.uint64), tf.constant([123456789, 3], tf.uint64)
    bits = tf.raw_ops.StatelessRandomUniformFullIntV2(shape=[4099], key=key, counter=counter,
                                                      alg=1, dtype=tf.uint32)
    kernel = tf.raw_ops.StatelessRandomUniformV2(shape=[4099], key=key, counter=counter, alg=1,
                                                 dtype=tf.float32)
    np.testing.assert_array_equal(rng_lib.unit_floats(bits).numpy(), kernel.numpy())

    def full(offset):
        return _rng(step=2, offset=offset).uniform([7, 5], rng_lib.GUMBEL)

    eager = full(tf.constant(0, tf.int64)).numpy()
    compiled = tf.function(full, jit_compile=True)(tf.constant(0, tf.int64)).numpy()
    np.testing.assert_array_equal(compiled, eager)

    @tf.function(jit_compile=True)
    def rows_in_a_loop():  # offsets that are not compile-time constants
        total = tf.zeros([2, 5])
        for i in tf.range(3):
            total += _rng(step=2, offset=tf.cast(i, tf.int64) * 2 + 1).uniform(
                [2, 5], rng_lib.GUMBEL)
        return total

    np.testing.assert_allclose(rows_in_a_loop().numpy(), eager[1:3] + eager[3:5] + eager[5:7],
                               rtol=1e-6)


def _batch(lengths, seq_len=32, seed=0):
    rs = np.random.RandomState(seed)
    ids = np.zeros([len(lengths), seq_len], np.int32)
    for i, n in enumerate(lengths):
        ids[i, :n] = rs.randint(5, 50, size=n)
        ids[i, 0] = SPECIAL.cls
        ids[i, n // 2] = SPECIAL.sep
        ids[i, n - 1] = SPECIAL.sep
        if n > 6:
            ids[i, 2] = SPECIAL.mask  # an input [MASK] is never chosen either
    mask = (np.arange(seq_len)[None] < np.array(lengths)[:, None]).astype(np.int32)
    return tf.constant(ids), tf.constant(mask), tf.zeros_like(tf.constant(ids))


def _mask(ids, mask, segs, step=0, mask_prob=0.15, n=None):
    n = n or int((mask_prob + 0.005) * ids.shape[1])
    return masking.mask(ids, mask, segs, mask_prob=mask_prob, max_predictions_per_seq=n,
                        special_ids=SPECIAL, rng=_rng(step=step))


def test_mask_counts_forbidden_positions_and_ids():
    lengths = [32, 20, 7, 4, 3]
    ids, mask, segs = _batch(lengths)
    for step in range(20):
        out = _mask(ids, mask, segs, step=step)
        positions = out.masked_lm_positions.numpy()
        weights = out.masked_lm_weights.numpy()
        for b, n in enumerate(lengths):
            k = max(1, min(4, int(np.round(n * 0.15))))  # official count, N = 4 here
            candidates = {p for p in range(n)
                          if ids[b, p].numpy() not in (SPECIAL.cls, SPECIAL.sep, SPECIAL.mask)}
            chosen = positions[b][weights[b] > 0].tolist()
            assert len(chosen) == min(k, len(candidates))
            assert len(set(chosen)) == len(chosen)  # without replacement
            assert set(chosen) <= candidates  # never [CLS], [SEP], [MASK] or padding
            assert (positions[b][weights[b] == 0] == 0).all()
            np.testing.assert_array_equal(out.masked_lm_ids.numpy()[b][weights[b] > 0],
                                          ids.numpy()[b][chosen])
            # Only chosen positions change, and only to [MASK].
            changed = np.nonzero(out.input_ids.numpy()[b] != ids.numpy()[b])[0]
            assert set(changed) <= set(chosen)
            assert (out.input_ids.numpy()[b][changed] == SPECIAL.mask).all()


def test_mask_statistics_85_percent_mask_and_uniform_positions():
    ids, mask, segs = _batch([32] * 64)
    replaced = total = 0
    counts = np.zeros(32)
    for step in range(30):
        out = _mask(ids, mask, segs, step=step)
        w = out.masked_lm_weights.numpy() > 0
        pos = out.masked_lm_positions.numpy()
        got = np.take_along_axis(out.input_ids.numpy(), pos, 1)
        replaced += int((got[w] == SPECIAL.mask).sum())
        total += int(w.sum())
        np.add.at(counts, pos[w], 1)
    assert abs(replaced / total - 0.85) < 0.03, replaced / total
    allowed = [p for p in range(32) if ids.numpy()[0, p] > 4]
    expected = total / len(allowed)
    assert counts[[p for p in range(32) if p not in allowed]].sum() == 0
    # Every candidate position is picked about equally often (5 sigma band).
    assert np.all(np.abs(counts[allowed] - expected) < 5 * np.sqrt(expected))


def test_mask_rejects_more_predictions_than_positions():
    ids, mask, segs = _batch([8], seq_len=8)
    with pytest.raises(ValueError, match="max_predictions_per_seq"):
        _mask(ids, mask, segs, n=9)


def test_unmask_restores_the_original_ids():
    ids, mask, segs = _batch([32, 12])
    out = _mask(ids, mask, segs)
    np.testing.assert_array_equal(masking.unmask(out).numpy(), ids.numpy())


def test_gather_positions_matches_numpy():
    seq = np.arange(2 * 5 * 3, dtype=np.float32).reshape(2, 5, 3)
    pos = np.array([[0, 4, 4], [2, 1, 0]], np.int32)
    expected = np.stack([seq[b][pos[b]] for b in range(2)])
    np.testing.assert_array_equal(masking.gather_positions(seq, pos).numpy(), expected)
    np.testing.assert_array_equal(masking.gather_positions(seq[..., 0], pos).numpy(),
                                  expected[..., 0])


def test_scatter_update_official_semantics():
    seq = tf.constant([[10, 11, 12, 13], [20, 21, 22, 23]], tf.int32)
    pos = tf.constant([[0, 2, 2], [3, 1, 0]], tf.int32)
    upd = tf.constant([[99, 5, 8], [7, 6, 98]], tf.int32)
    out, updated = masking.scatter_update(seq, upd, pos)
    # Position 0 ignored; the duplicate at 2 gets floor((5 + 8) / 2) = 6.
    np.testing.assert_array_equal(out.numpy(), [[10, 11, 6, 13], [20, 6, 22, 7]])
    np.testing.assert_array_equal(updated.numpy(), [[0, 0, 1, 0], [0, 1, 0, 1]])
    fseq = tf.zeros([1, 3, 2])
    fout, _ = masking.scatter_update(fseq, tf.constant([[[1., 2.], [3., 4.]]]),
                                     tf.constant([[1, 1]]))
    np.testing.assert_allclose(fout.numpy()[0, 1], [2.0, 3.0])  # duplicate floats: the mean


def _sample_counts(logits, draws=4000, temperature=1.0, disallow=None):
    logits = tf.tile(tf.constant([logits], tf.float32), [draws, 1]) / temperature
    noise = _rng(step=1).uniform(tf.shape(logits), rng_lib.GUMBEL)
    ids = masking.sample_from_softmax(logits, noise, disallow).numpy()
    return np.bincount(ids, minlength=logits.shape[-1]) / draws


def test_sampling_follows_the_softmax_and_temperature():
    logits = np.log(np.array([0.5, 0.3, 0.15, 0.05]))
    np.testing.assert_allclose(_sample_counts(logits), [0.5, 0.3, 0.15, 0.05], atol=0.03)
    cold = _sample_counts(logits, temperature=0.05)
    assert cold[0] > 0.99
    hot = _sample_counts(logits, temperature=100.0)
    np.testing.assert_allclose(hot, 0.25, atol=0.03)


def test_sampling_from_the_bits_is_sampling_from_their_floats():
    """The training step hands the Gumbel block raw bits (one pass less over [B, N, V]); the
    perturbed logits are the same bits as from the floats, in the compiled block too (XLA
    folded the kernel's `- 1.0` into the noise's `+ 1e-9` once: 1 in 200 numbers differed)."""
    rng = _rng(step=5, offset=3)
    logits = tf.random.stateless_normal([2, 3, 8192], seed=[1, 5]) * 3.0  # 49152: fused
    assert logits.shape.num_elements() >= layers.MIN_FUSED_ELEMENTS
    disallow = tf.one_hot([[1, 2, 3], [4, 5, 6]], 8192)
    bits = rng.bits(tf.shape(logits), rng_lib.GUMBEL)
    floats = rng.uniform(tf.shape(logits), rng_lib.GUMBEL)
    mantissa_bits = tf.constant(np.arange(1 << 23, dtype=np.uint32) | np.uint32(0xA5800000))
    for jit in (False, True):
        perturbed = tf.function(masking._gumbel_perturbed, jit_compile=jit, autograph=False)
        from_bits, from_floats = (perturbed(logits, noise, disallow, 0.7).numpy()
                                  for noise in (bits, floats))
        np.testing.assert_array_equal(from_bits.view(np.uint32), from_floats.view(np.uint32))
        # Every mantissa: the kernel's construction (bit-cast into [1, 2), minus 1) exactly.
        reference = tf.bitcast(tf.bitwise.bitwise_or(
            tf.bitwise.bitwise_and(mantissa_bits, 0x7FFFFF), 0x3F800000), tf.float32) - 1.0
        converted = tf.function(rng_lib.unit_floats, jit_compile=jit)(mantissa_bits)
        np.testing.assert_array_equal(converted.numpy(), reference.numpy())
    np.testing.assert_array_equal(masking.sample_from_softmax(logits, bits, disallow).numpy(),
                                  masking.sample_from_softmax(logits, floats, disallow).numpy())


def test_sampling_disallow_never_picks_the_disallowed_token():
    logits = np.array([5.0, 0.0, 0.0, 0.0])
    disallow = tf.one_hot(tf.zeros([4000], tf.int32), 4)
    counts = _sample_counts(logits, disallow=disallow)
    assert counts[0] == 0.0 and abs(counts[1:].sum() - 1.0) < 1e-9
