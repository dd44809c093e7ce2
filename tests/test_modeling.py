"""The Keras-free encoder: shapes, masking, official variable names, sharing, dtypes, tracing."""
import numpy as np
import pytest
import tensorflow as tf

from model import layers
from model import modeling
from util import checkpoint

TINY = dict(vocab_size=40, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
            intermediate_size=64, max_position_embeddings=16, embedding_size=16)


def tiny_model(**kwargs):
    return modeling.BertModel(modeling.BertConfig(**TINY), **kwargs)


def batch(ids):
    ids = tf.constant(ids, tf.int32)
    return ids, tf.cast(ids > 0, tf.int32), tf.zeros_like(ids)


def test_output_shapes():
    model = tiny_model()
    out = model(*batch([[2, 5, 6, 3, 0], [2, 7, 3, 0, 0]]), training=False)
    assert out.sequence_output.shape == (2, 5, 32)
    assert out.pooled_output.shape == (2, 32)
    assert len(out.all_layer_outputs) == 2
    np.testing.assert_array_equal(out.pooled_output, out.sequence_output[:, 0])


def test_padding_never_changes_real_positions():
    model = tiny_model()
    short = model(*batch([[2, 5, 6, 3]]), training=False).sequence_output
    padded = model(*batch([[2, 5, 6, 3, 0, 0, 0]]), training=False).sequence_output
    np.testing.assert_allclose(short[0], padded[0, :4], atol=1e-5)


def test_variable_names_and_shapes_match_the_official_layout():
    model = tiny_model()
    names = {checkpoint.checkpoint_name(v): v.shape.as_list() for v in model.variables}
    expected = {
        "electra/embeddings/word_embeddings": [40, 16],
        "electra/embeddings/token_type_embeddings": [2, 16],
        "electra/embeddings/position_embeddings": [16, 16],
        "electra/embeddings/LayerNorm/gamma": [16],
        "electra/embeddings/LayerNorm/beta": [16],
        "electra/embeddings_project/kernel": [16, 32],
        "electra/embeddings_project/bias": [32],
    }
    for i in range(2):
        p = f"electra/encoder/layer_{i}"
        for part in ("query", "key", "value"):
            expected[f"{p}/attention/self/{part}/kernel"] = [32, 32]
            expected[f"{p}/attention/self/{part}/bias"] = [32]
        expected[f"{p}/attention/output/dense/kernel"] = [32, 32]
        expected[f"{p}/attention/output/dense/bias"] = [32]
        expected[f"{p}/attention/output/LayerNorm/gamma"] = [32]
        expected[f"{p}/attention/output/LayerNorm/beta"] = [32]
        expected[f"{p}/intermediate/dense/kernel"] = [32, 64]
        expected[f"{p}/intermediate/dense/bias"] = [64]
        expected[f"{p}/output/dense/kernel"] = [64, 32]
        expected[f"{p}/output/dense/bias"] = [32]
        expected[f"{p}/output/LayerNorm/gamma"] = [32]
        expected[f"{p}/output/LayerNorm/beta"] = [32]
    assert names == expected
    assert all(v.dtype == tf.float32 for v in model.variables)


def test_no_projection_when_embedding_size_equals_hidden():
    config = modeling.BertConfig(**{**TINY, "embedding_size": 32})
    names = [checkpoint.checkpoint_name(v) for v in modeling.BertModel(config).variables]
    assert not any("embeddings_project" in n for n in names)


def test_generator_shares_embedding_variables(tmp_path):
    disc = tiny_model()
    gen_config = modeling.get_generator_config(disc.config, 0.25, 1.0)
    gen = modeling.BertModel(gen_config, scope="generator", embeddings=disc.embeddings)
    assert gen.embeddings.word_embeddings is disc.embeddings.word_embeddings
    named = checkpoint.by_name(list(disc.variables) + list(gen.variables))
    assert sum("word_embeddings" in n for n in named) == 1
    assert "generator/embeddings_project/kernel" in named
    assert "generator/encoder/layer_1/attention/self/query/kernel" in named
    assert not any(n.startswith("generator/embeddings/") for n in named)
    prefix = checkpoint.save_tensors(str(tmp_path / "ckpt"), named)
    stored = dict(tf.train.list_variables(prefix))
    assert stored["electra/embeddings/word_embeddings"] == [40, 16]
    assert len(stored) == len(named)


def test_generator_config_follows_official_sizing():
    small = modeling.get_bert_config("small", 30522)
    gen = modeling.get_generator_config(small, 0.25, 1.0)
    assert (gen.hidden_size, gen.intermediate_size, gen.num_attention_heads,
            gen.num_hidden_layers) == (64, 256, 1, 12)
    base = modeling.get_generator_config(modeling.get_bert_config("base", 30522), 1 / 3, 1.0)
    assert (base.hidden_size, base.num_attention_heads) == (256, 4)


def test_dropout_follows_training_flag_and_seed():
    model = tiny_model()
    inputs = batch([[2, 5, 6, 3, 9, 9]])
    eval_a = model(*inputs, training=False).sequence_output
    eval_b = model(*inputs, training=False).sequence_output
    np.testing.assert_array_equal(eval_a, eval_b)
    train_a = model(*inputs, training=True, seed=[1, 2]).sequence_output
    train_b = model(*inputs, training=True, seed=[1, 2]).sequence_output
    train_c = model(*inputs, training=True, seed=[1, 3]).sequence_output
    np.testing.assert_array_equal(train_a, train_b)
    assert np.abs(train_a - train_c).max() > 1e-3
    assert np.abs(train_a - eval_a).max() > 1e-3
    with pytest.raises(ValueError, match="seed is required"):
        model(*inputs, training=True)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_low_precision_compute_keeps_float32_weights(dtype):
    ref = tiny_model()
    low = tiny_model(compute_dtype=dtype)
    inputs = batch([[2, 5, 6, 3, 9, 0]])
    out = low(*inputs, training=False).sequence_output
    assert out.dtype == modeling.COMPUTE_DTYPES[dtype]
    assert all(v.dtype == tf.float32 for v in low.variables)
    # Same seed, same weights: the low-precision pass tracks float32 closely (LayerNorm'd units).
    np.testing.assert_allclose(tf.cast(out, tf.float32), ref(*inputs, training=False).sequence_output,
                               atol=0.1)


def test_graph_and_xla_match_eager():
    model = tiny_model()
    inputs = batch([[2, 5, 6, 3, 9, 0], [2, 4, 3, 0, 0, 0]])

    # The seed is an argument, as in training: a constant seed would let XLA fold the random
    # numbers at compile time with TensorFlow's kernel, whose Philox stream is not XLA's.
    def forward(ids, mask, types, seed):
        return model(ids, mask, types, training=True, seed=seed).sequence_output

    seed = tf.constant([4, 5])
    eager = forward(*inputs, seed)
    graph = tf.function(forward)(*inputs, seed)
    xla = tf.function(forward, jit_compile=True)(*inputs, seed)
    np.testing.assert_allclose(graph, eager, atol=1e-5)
    np.testing.assert_allclose(xla, eager, atol=1e-4)
    # Eager and graph calls share the layers' traced function; XLA traces its layers in place.
    assert model._layer_function.experimental_get_tracing_count() == 1


def test_unknown_batch_and_length_trace_once():
    model = tiny_model()
    spec = tf.TensorSpec([None, None], tf.int32)
    fn = tf.function(lambda i, m, t: model(i, m, t, training=False).sequence_output,
                     input_signature=[spec, spec, spec])
    assert fn(*batch([[2, 5, 3]])).shape == (1, 3, 32)
    assert fn(*batch([[2, 5, 3, 4, 0], [2, 3, 0, 0, 0]])).shape == (2, 5, 32)
    assert fn.experimental_get_tracing_count() == 1


def test_config_errors_and_json_round_trip(tmp_path):
    with pytest.raises(ValueError, match=r"hidden_size \(30\) must be a multiple of num_attention_heads \(4\)"):
        modeling.BertConfig(vocab_size=10, hidden_size=30, num_attention_heads=4)
    with pytest.raises(ValueError, match=r"hidden_act must be one of \['gelu'.*got 'swishy'"):
        modeling.BertConfig(vocab_size=10, hidden_act="swishy")
    # Sizes are integers >= 1 (true is an int in Python; 0 heads used to divide by zero);
    # dropout probabilities in [0, 1); each error names where the value came from.
    for key, value in (("num_hidden_layers", True), ("hidden_size", "256"),
                       ("num_attention_heads", 0), ("intermediate_size", 64.0)):
        with pytest.raises(ValueError, match=rf"^x\.json: {key} must be an integer >= 1, got "):
            modeling.BertConfig.from_dict({"vocab_size": 10, key: value}, where="x.json")
    for value in (1.0, -0.1, float("nan"), None):
        with pytest.raises(ValueError, match=r"hidden_dropout_prob must be a number in \[0, 1\)"):
            modeling.BertConfig(vocab_size=10, hidden_dropout_prob=value)
    with pytest.raises(ValueError, match=r"unknown keys \['hiden_size'\]"):
        modeling.BertConfig.from_dict({"vocab_size": 10, "hiden_size": 8})
    config = modeling.BertConfig(**TINY)
    path = tmp_path / "bert_config.json"
    path.write_text(config.to_json_string())
    assert modeling.BertConfig.from_json_file(str(path)) == config


def test_model_sizes_follow_table_6():
    for size, (layers, hidden, emb, heads, ffn) in {
            "small": (12, 256, 128, 4, 1024), "base": (12, 768, 768, 12, 3072),
            "large": (24, 1024, 1024, 16, 4096)}.items():
        c = modeling.get_bert_config(size, 30522)
        assert (c.num_hidden_layers, c.hidden_size, c.embedding_size, c.num_attention_heads,
                c.intermediate_size) == (layers, hidden, emb, heads, ffn)
    with pytest.raises(ValueError, match="unknown model_size 'medium'"):
        modeling.get_bert_config("medium", 100)


@pytest.mark.parametrize("dtype", [tf.float32, tf.bfloat16])
def test_layer_norm_written_out_gradient_equals_automatic_differentiation(dtype):
    from model import layers
    norm = layers.LayerNorm(8, "t/LayerNorm")
    norm.gamma.assign(tf.random.stateless_normal([8], seed=[1, 2]))
    norm.beta.assign(tf.random.stateless_normal([8], seed=[1, 3]))
    x = tf.cast(tf.random.stateless_normal([3, 5, 8], seed=[1, 4]) * 3.0 + 1.0, dtype)
    weights = tf.random.stateless_normal([3, 5, 8], seed=[1, 5])

    def reference(x):  # the plain formula, differentiated by the tape
        x = tf.cast(x, tf.float32)
        mean, variance = tf.nn.moments(x, axes=[-1], keepdims=True)
        return (x - mean) * tf.math.rsqrt(variance + 1e-12) * norm.gamma + norm.beta

    results = []
    for fn in (tf.function(norm), reference):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = fn(x)
            loss = tf.reduce_sum(tf.cast(y, tf.float32) * weights)
        assert y.dtype == (dtype if fn is not reference else tf.float32)
        results.append([tf.cast(t, tf.float32) for t in
                        [y] + tape.gradient(loss, [x, norm.gamma, norm.beta])])
    tol = 1e-5 if dtype == tf.float32 else 1e-2
    for got, want in zip(*results):
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


@pytest.fixture
def layer_settings():
    """Restores model.layers' speed settings a test changes; blocks of any size are fused
    (these tests' tensors are smaller than MIN_FUSED_ELEMENTS)."""
    saved = (layers.FUSE_ELEMENTWISE, layers.DROPOUT_MASK_BITS, layers.BLOCK_MATH_FLOAT32,
             layers.MIN_FUSED_ELEMENTS, layers.BACKWARD_BLOCKS)
    layers.MIN_FUSED_ELEMENTS = 0
    yield layers
    (layers.FUSE_ELEMENTWISE, layers.DROPOUT_MASK_BITS, layers.BLOCK_MATH_FLOAT32,
     layers.MIN_FUSED_ELEMENTS, layers.BACKWARD_BLOCKS) = saved


@pytest.mark.parametrize("math32", [True, False])
def test_bfloat16_blocks_round_once_at_the_end(layer_settings, math32):
    """A bfloat16 bias + GELU block computes in float32 and rounds its result once: it equals
    the float32 result rounded to bfloat16 (up to one bfloat16 step where float32 rounding sits
    on a tie), whereas op-by-op bfloat16 math (BLOCK_MATH_FLOAT32 off) strays further."""
    layers = layer_settings
    layers.BLOCK_MATH_FLOAT32 = math32
    dense = layers.Dense(64, 256, "ffn", activation="gelu", seed=1)
    x = tf.random.stateless_normal([128, 64], seed=[1, 2])
    y = tf.function(dense)(tf.cast(x, tf.bfloat16))
    # The matmul rounds its output to bfloat16 before the block on both sides.
    pre = tf.cast(tf.matmul(tf.cast(x, tf.bfloat16), tf.cast(dense.kernel, tf.bfloat16)),
                  tf.float32)
    reference = tf.cast(layers.gelu(pre), tf.bfloat16)
    mismatch = np.mean(y.numpy() != reference.numpy())
    if math32:
        assert mismatch < 0.01
    else:
        assert mismatch > 0.05


@pytest.mark.parametrize("bits", [16, 32])
def test_dropout_masks_drop_the_rate_and_scale_the_rest(layer_settings, bits):
    layers = layer_settings
    layers.DROPOUT_MASK_BITS = bits
    x = tf.ones([64, 1024])
    out = tf.function(lambda x, seed: layers.dropout(x, 0.1, layers.SeedStream(seed), True))(
        x, tf.constant([3, 4]))
    kept = out.numpy() > 0
    # 65,536 units: the kept share is 0.9 within 4 standard deviations (0.0047).
    assert abs(kept.mean() - 0.9) < 0.005
    np.testing.assert_allclose(out.numpy()[kept], 1.0 / 0.9, rtol=1e-6)
    assert np.all(out.numpy()[~kept] == 0.0)
    # 16-bit numbers: two per uint32, both halves used (no column kept at a different rate).
    assert abs(kept[:, 0::2].mean() - kept[:, 1::2].mean()) < 0.01


def _loss_and_gradients(model) -> tuple[float, list[np.ndarray]]:
    """A training-mode forward and backward pass of `model` on two short rows (dropout on, its
    masks from a fixed seed), traced under model.layers' settings of the moment."""
    inputs = batch([[2, 5, 6, 3, 9, 0], [2, 4, 3, 0, 0, 0]])
    weights = tf.random.stateless_normal([2, 6, 32], seed=[4, 5])

    @tf.function
    def step(seed):
        with tf.GradientTape() as tape:
            out = model(*inputs, training=True, seed=seed).sequence_output
            loss = tf.reduce_sum(out * weights)
        return loss, tape.gradient(loss, model.trainable_variables)

    loss, grads = step(tf.constant([7, 8]))
    return float(loss), [tf.convert_to_tensor(g).numpy() for g in grads]


def _assert_gradients_close(got: list, want: list) -> None:
    """Equal up to float32 rounding (relative to each gradient's largest entry)."""
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5 * max(1.0, np.abs(w).max()))


def test_fused_blocks_compute_what_the_plain_graph_ops_compute(layer_settings):
    """The XLA-compiled elementwise blocks against the same code as plain graph ops: the same
    dropout masks (drawn outside the blocks), values and gradients up to float32 rounding."""
    layers = layer_settings
    model = tiny_model(seed=2)
    layers.FUSE_ELEMENTWISE = True
    loss, grads = _loss_and_gradients(model)
    layers.FUSE_ELEMENTWISE = False
    plain_loss, plain_grads = _loss_and_gradients(model)
    assert loss == pytest.approx(plain_loss, rel=1e-5)
    _assert_gradients_close(grads, plain_grads)


@pytest.mark.parametrize("remove_padding", [True, False])
def test_a_forward_pass_alone_compiles_no_block_once_padding_is_removed(layer_settings,
                                                                        remove_padding):
    """Packed, every batch has shapes of its own and XLA would compile the blocks for each:
    in 16-bit a training step keeps them compiled, evaluation and prediction run them as graph
    ops; with padding the shapes are few and both keep them compiled."""
    model = tiny_model(compute_dtype="bfloat16", remove_padding=remove_padding)
    inputs = batch([[2, 5, 6, 3, 9, 0], [2, 4, 3, 0, 0, 0]])
    seed = tf.constant([7, 8])
    def compiles(fn) -> bool:
        return bool(compiled_functions(tf.function(fn).get_concrete_function()))

    assert compiles(lambda: model(*inputs, training=True, seed=seed))
    assert compiles(lambda: model(*inputs, training=False)) == (not remove_padding)


@pytest.mark.parametrize("fuse", [True, False])
def test_written_out_block_gradients_equal_automatic_differentiation(layer_settings, fuse):
    """The backward passes of bias + GELU and of dropout + residual + LayerNorm written out
    (BACKWARD_BLOCKS) against TensorFlow's gradients of the forward blocks, compiled or as graph
    ops, dropout on (the same masks): every weight's gradient up to float32 rounding."""
    layers = layer_settings
    layers.FUSE_ELEMENTWISE = fuse
    model = tiny_model(seed=3)
    layers.BACKWARD_BLOCKS = True
    _, written_out = _loss_and_gradients(model)
    layers.BACKWARD_BLOCKS = False
    _, automatic = _loss_and_gradients(model)
    _assert_gradients_close(written_out, automatic)


@pytest.mark.parametrize("fuse", [True, False])
def test_sparse_cross_entropy_block_matches_tensorflows_kernel(layer_settings, fuse):
    """The fused masked-LM loss computes TensorFlow's sparse softmax cross-entropy, values and
    gradients, up to float32 rounding; from bfloat16 logits it reads them in float32."""
    layers = layer_settings
    layers.FUSE_ELEMENTWISE = fuse
    logits = tf.random.stateless_normal([3, 5, 700], seed=[2, 3]) * 4.0
    labels = tf.random.stateless_uniform([3, 5], seed=[2, 4], maxval=700, dtype=tf.int32)
    weights = tf.random.stateless_uniform([3, 5], seed=[2, 5])

    def loss_and_gradient(loss_fn):
        @tf.function
        def run(logits):
            with tf.GradientTape() as tape:
                tape.watch(logits)
                losses = loss_fn(logits, labels)
                total = tf.reduce_sum(weights * losses)
            return losses, tape.gradient(total, logits)
        return run(logits)

    got = loss_and_gradient(layers.sparse_softmax_cross_entropy)
    want = loss_and_gradient(lambda x, y: tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=y, logits=x))
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-5, atol=1e-6)
    low = layers.sparse_softmax_cross_entropy(tf.cast(logits, tf.bfloat16), labels)
    assert low.dtype == tf.float32
    np.testing.assert_allclose(low.numpy(), got[0].numpy(), rtol=0.05, atol=0.05)


def test_seed_stream_hands_out_the_seeds_of_stateless_fold_in():
    """Its first half drawn once per stream: the same seeds, so the same dropout masks."""
    base = tf.constant([7, 11], tf.int64)
    stream = layers.SeedStream(base)
    for n in range(1, 5):
        np.testing.assert_array_equal(
            stream.next().numpy(),
            tf.random.experimental.stateless_fold_in(base, n, alg=layers.RNG_ALG).numpy())


def compiled_functions(concrete_function) -> list:
    """Names of the XLA-compiled functions a traced function calls."""
    library = concrete_function.graph.as_graph_def().library
    return [f.signature.name for f in library.function if f.attr["_XlaMustCompile"].b]


def test_small_blocks_run_as_graph_ops_large_ones_compiled():
    """A block over fewer than MIN_FUSED_ELEMENTS elements is not worth its XLA compile."""
    dense = layers.Dense(64, 256, "ffn", activation="gelu", seed=1)

    def compiled(rows):
        return bool(compiled_functions(tf.function(dense).get_concrete_function(
            tf.TensorSpec([rows, 64], tf.float32))))

    assert 127 * 256 < layers.MIN_FUSED_ELEMENTS <= 128 * 256
    assert not compiled(127)
    assert compiled(128)


def test_layers_share_one_trace_and_compute_what_traced_in_place(monkeypatch):
    """SHARE_LAYER_TRACE: both layers of a training step through one trace of the shared layer
    function; the loss and gradients are those of each layer's ops traced in place."""
    model = tiny_model(seed=3)
    monkeypatch.setattr(modeling, "SHARE_LAYER_TRACE", True)
    loss, grads = _loss_and_gradients(model)
    assert model._layer_function.experimental_get_tracing_count() == 1
    # Traced with the batch's sizes as numbers: shapes inside are known (an unknown size would
    # send the tiny model's elementwise blocks to an XLA compile).
    (traced,) = model._layer_function._list_all_concrete_functions()
    assert all(t.shape.is_fully_defined() for op in traced.graph.get_operations()
               for t in op.outputs)
    monkeypatch.setattr(modeling, "SHARE_LAYER_TRACE", False)
    in_place_loss, in_place_grads = _loss_and_gradients(model)
    assert loss == pytest.approx(in_place_loss, rel=1e-6)
    _assert_gradients_close(grads, in_place_grads)
    # Every variable got its gradient through the shared function (none is left out).
    assert len(grads) == len(model.trainable_variables) and all(g is not None for g in grads)
