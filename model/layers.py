"""Small Keras-free building blocks: variables, dense, LayerNorm, GELU, dropout, seed streams.

Variables are float32 and carry their full checkpoint name (e.g. "electra/encoder/layer_0/
attention/self/query/kernel"); math runs in the dtype of the incoming activations, so a bfloat16
or float16 forward pass uses float32 master weights.

The elementwise work between two matmuls (bias + activation; dropout + residual + LayerNorm;
scale + mask + softmax + dropout) is compiled by XLA, one fused pass over memory per block, while
the matmuls stay in the graph, where oneDNN runs them faster than XLA's CPU dots. Graph mode runs
every elementwise op as its own pass over a [B*L, H] tensor; one compiled pass per block is the
lever BENCHMARKS.md measures ("Speed levers"). Dropout's random numbers are drawn outside the blocks
(`_random_bits`); under bfloat16 or float16 a block computes in float32 and rounds once
(`BLOCK_MATH_FLOAT32`).
"""
import contextlib
import functools
import math
import threading
import zlib

import tensorflow as tf

from util import stateless_random


# Stateless RNG algorithm pinned: under XLA the default algorithm is ~100x slower on CPU.
RNG_ALG = "philox"


def create_variable(name: str, shape, init: str = "normal", stddev: float = 0.02,
                    seed: int = 0, trainable: bool = True,
                    seed_name: str | None = None) -> tf.Variable:
    """A float32 variable named `name`; `init` is "normal" (truncated, `stddev`),
    "glorot_uniform" (TF1's default for `tf.layers.dense` without an initializer), "zeros" or
    "ones".

    Initial values are a deterministic function of (seed, name), so two processes (e.g. the
    workers of a multi-worker run) build identical models without broadcasting. `seed_name`
    replaces the name in that function (a task head: the same values whatever the task's name).
    """
    name_seed = zlib.crc32((seed_name or name).encode("utf-8")) & 0x7FFFFFFF
    if init == "normal":
        value = tf.random.stateless_truncated_normal(
            shape, seed=[seed, name_seed], stddev=stddev, dtype=tf.float32)
    elif init == "glorot_uniform":
        fan_in, fan_out = (shape[0], shape[-1]) if len(shape) > 1 else (shape[0], shape[0])
        limit = math.sqrt(6.0 / (fan_in + fan_out))
        value = tf.random.stateless_uniform(shape, seed=[seed, name_seed], minval=-limit,
                                            maxval=limit, dtype=tf.float32)
    elif init == "zeros":
        value = tf.zeros(shape, tf.float32)
    elif init == "ones":
        value = tf.ones(shape, tf.float32)
    else:
        raise ValueError(f"unknown initializer {init!r} for variable {name}")
    # ONLY_FIRST_REPLICA: updates computed from all-reduced gradients are identical on every
    # replica, and this aggregation makes assigning them in replica context legal.
    return tf.Variable(value, name=name, trainable=trainable,
                       aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)


class SeedStream:
    """Hands out distinct stateless seeds derived from one base seed (a [2] int tensor).

    Used at trace time: each dropout layer asks for the next seed, so the whole forward pass is a
    pure function of the base seed (exact resume needs no RNG state beyond the step number).
    """

    def __init__(self, seed):
        self._count = 0
        self._head = None
        if seed is not None:
            # The n-th seed is tf.random.experimental.stateless_fold_in(seed, n), which is
            # [a random int32 drawn from `seed` alone, n]: that first half is drawn once here,
            # not once per dropout layer (util/stateless_random.py: the same numbers). Drawn in
            # the graph the stream is made in, so branches and recomputations can capture it.
            self._head = stateless_random.full_range([], tf.cast(seed, tf.int64), tf.int32,
                                                     alg=RNG_ALG)

    def next(self):
        if self._head is None:
            raise ValueError("a seed is required when training=True (dropout or sampling needs it)")
        self._count += 1
        return tf.stack([self._head, tf.constant(self._count, tf.int32)])


# False runs the elementwise blocks as plain graph ops, as before they were fused
# (benchmarks/ab_step.py measures what the fusion gains). Read when a step is traced.
FUSE_ELEMENTWISE = True

# Blocks over fewer elements than this run as graph ops: each compile costs about 80 ms on this
# CPU, more than fusing saves on a tensor that small in a short run (the tiny models of tests).
# Every block of ELECTRA-Small, of the demo's model and of a 128-token single-example forward is
# at least this large. Read when a step is traced.
MIN_FUSED_ELEMENTS = 1 << 15

_fusion = threading.local()


@contextlib.contextmanager
def elementwise_fusion(enabled: bool):
    """Within (on this thread, while tracing): the blocks are compiled only if `enabled` too.

    XLA compiles a block for every input shape it meets, about 80 ms each on this CPU. A model
    whose shapes change from batch to batch (padding removed: the number of real tokens) meets a
    new shape every few steps; in float32 it runs the blocks as graph ops, as fast per step and
    never compiled (BENCHMARKS.md, "The packed encoder's elementwise blocks"): the same math, the same float32
    widening (BLOCK_MATH_FLOAT32)."""
    saved = getattr(_fusion, "enabled", True)
    _fusion.enabled = enabled
    try:
        yield
    finally:
        _fusion.enabled = saved


# True: a block's math runs in float32 whatever the activations' dtype, rounded to it once at the
# end. XLA's CPU code computes a bfloat16 op by widening it, computing and rounding it back, op
# after op: a bfloat16 GELU block took twice as long as the same block in float32 forward, 1.4x
# forward and backward (benchmarks/fused_block.py), and rounded at every op. False: the blocks'
# math in the activations' dtype, as before. No effect in float32. Read when a step is traced.
BLOCK_MATH_FLOAT32 = True


# True: the FFN's bias + GELU and each sub-layer's dropout + residual + LayerNorm have their
# backward passes written out as one block each (`bias_gelu`, `dropout_add_norm`); False: the
# gradients TensorFlow derives for the forward blocks, 2-3x as slow (benchmarks/ab_step.py
# auto_block_gradients). Read when a step is traced.
BACKWARD_BLOCKS = True


def _math(t: tf.Tensor) -> tf.Tensor:
    """`t` in the dtype a block computes in (BLOCK_MATH_FLOAT32)."""
    return tf.cast(t, tf.float32) if BLOCK_MATH_FLOAT32 else t


def elementwise_block(fn):
    """An elementwise (or row-wise) block compiled by XLA into one kernel (module docstring)."""
    # One compiled function per BLOCK_MATH_FLOAT32 value: each traces under its own value only.
    compiled = {math32: tf.function(fn, jit_compile=True, autograph=False)
                for math32 in (True, False)}
    # Too small to compile, the block is still a function: traced once per input signature and
    # one call node at each use, instead of its ops traced again at every layer (tiny models run
    # all their blocks this way). Large unfused blocks (float32's packed encoder) stay inline:
    # as functions, ELECTRA-Small's packed float32 fine-tuning step measured 2-5% slower in
    # pairs of runs (inside the host's drift, but every pair), for tracing it pays once a run.
    small = {math32: tf.function(fn, autograph=False) for math32 in (True, False)}

    @functools.wraps(fn)
    def run(*args):
        # Variables enter as values read here: a variable passed into a function under a
        # distribution strategy resolves to one replica's copy, so the other replicas' gradients
        # would not reach theirs (measured: half the gradient norm on 2 replicas).
        args = [tf.convert_to_tensor(a) if isinstance(a, tf.Variable) else a for a in args]
        size = args[0].shape.num_elements()  # None: not known while tracing
        fused = (FUSE_ELEMENTWISE and getattr(_fusion, "enabled", True)
                 and (size is None or size >= MIN_FUSED_ELEMENTS))
        if fused:
            return compiled[BLOCK_MATH_FLOAT32](*args)
        if size is not None and size < MIN_FUSED_ELEMENTS:
            return small[BLOCK_MATH_FLOAT32](*args)
        return fn(*args)

    return run


# Dropout keeps a unit when 16 random bits are >= round(rate * 2**16): a drop probability
# within 8e-6 of `rate` (0.100006 for 0.1) from half the random numbers float uniforms take;
# generating them was a tenth of a pre-training step. 32: float32 uniforms >= rate, exactly
# `rate` as the official code. Read when a step is traced.
DROPOUT_MASK_BITS = 16


def _random_bits(shape, seeds: SeedStream | None, training: bool, rate: float):
    """The random numbers of one dropout mask over `shape` (None when dropout is off), drawn
    by TensorFlow's Philox kernel outside the fused blocks: XLA's own generator ran 2.5x
    slower on this CPU."""
    if not training or rate <= 0.0:
        return None
    if DROPOUT_MASK_BITS == 32:
        return stateless_random.uniform(shape, seeds.next(), alg=RNG_ALG)
    count = (tf.reduce_prod(shape) + 1) // 2  # two 16-bit numbers per uint32
    return stateless_random.full_range(tf.reshape(count, [1]), seeds.next(), tf.uint32,
                                       alg=RNG_ALG)


def _dropout(x: tf.Tensor, rate: float, bits) -> tf.Tensor:
    """Inverted dropout with the numbers of `_random_bits` (None: off)."""
    if bits is None:
        return x
    if bits.dtype == tf.uint32:
        # Word j holds the numbers of unit j (low 16 bits) and unit j + len(bits) (high 16
        # bits); "high half >= t" is "word >= t * 65536": no shift, no bitcast.
        threshold = int(round(rate * 65536))
        keep = tf.concat([tf.bitwise.bitwise_and(bits, 0xFFFF) >= threshold,
                          bits >= threshold << 16], 0)
        keep = tf.reshape(keep[:tf.size(x)], tf.shape(x))
    else:
        keep = bits >= rate
    return tf.where(keep, x / tf.cast(1.0 - rate, x.dtype), tf.zeros_like(x))


@elementwise_block
def _dropout_block(x, rate: float, bits):
    return tf.cast(_dropout(_math(x), rate, bits), x.dtype)


def dropout(x: tf.Tensor, rate: float, seeds: SeedStream | None, training: bool) -> tf.Tensor:
    bits = _random_bits(tf.shape(x), seeds, training, rate)
    return x if bits is None else _dropout_block(x, rate, bits)


@elementwise_block
def _dropout_add_norm(y, residual, gamma, beta, epsilon: float, rate: float, bits):
    z = tf.cast(_dropout(_math(y), rate, bits) + _math(residual), tf.float32)
    return tf.cast(layer_norm(z, gamma, beta, epsilon), residual.dtype)


def dropout_add_norm(y: tf.Tensor, residual: tf.Tensor, norm: "LayerNorm", rate: float,
                     seeds: SeedStream | None, training: bool) -> tf.Tensor:
    """norm(dropout(y) + residual): the end of each Transformer sub-layer, one fused block, its
    backward pass another (BACKWARD_BLOCKS)."""
    bits = _random_bits(tf.shape(y), seeds, training, rate)
    if not BACKWARD_BLOCKS:
        return _dropout_add_norm(y, residual, norm.gamma, norm.beta, norm.epsilon, rate, bits)
    return _with_backward_block(_dropout_add_norm, _dropout_add_norm_backward,
                                (y, residual, norm.gamma, norm.beta), (norm.epsilon, rate, bits))


def _with_backward_block(forward, backward, tensors, static=()):
    """forward(*tensors, *static), whose gradient is backward(upstream, *tensors, *static): the
    gradients of `tensors` in order. Variables among `tensors` enter as values, so that the
    gradients reach them; the backward block is fused or not as the forward's (it is traced
    later, outside the forward's `elementwise_fusion`)."""
    fusion = getattr(_fusion, "enabled", True)

    @tf.custom_gradient
    def run(*values):
        def gradient(upstream):
            with elementwise_fusion(fusion):
                return backward(upstream, *values, *static)
        return forward(*values, *static), gradient

    return run(*[tf.convert_to_tensor(t) for t in tensors])


@elementwise_block
def _dropout_add_norm_backward(upstream, y, residual, gamma, beta, epsilon: float, rate: float,
                               bits):
    """(d/dy, d/dresidual, d/dgamma, d/dbeta) of `_dropout_add_norm` (beta does not enter them):
    the forward's sum and moments recomputed, then LayerNorm's backward (as `layer_norm`'s) and
    dropout's (the same mask and scale)."""
    z = tf.cast(_dropout(_math(y), rate, bits) + _math(residual), tf.float32)
    mean, variance = tf.nn.moments(z, axes=[-1], keepdims=True)
    inv_std = tf.math.rsqrt(variance + epsilon)
    normed = (z - mean) * inv_std
    dout = tf.cast(upstream, tf.float32)
    dnormed = dout * gamma
    dz = inv_std * (dnormed - tf.reduce_mean(dnormed, -1, keepdims=True)
                    - normed * tf.reduce_mean(dnormed * normed, -1, keepdims=True))
    rows = list(range(dz.shape.rank - 1))
    dz_math = tf.cast(dz, _math(y).dtype)
    return (tf.cast(_dropout(dz_math, rate, bits), y.dtype), tf.cast(dz_math, residual.dtype),
            tf.reduce_sum(dout * normed, rows), tf.reduce_sum(dout, rows))


@elementwise_block
def _attention_probs(scores, attention_bias, scale: float, rate: float, bits):
    # Softmax in float32: bfloat16 has too few mantissa bits for long rows of exponentials.
    probs = tf.nn.softmax(tf.cast(scores, tf.float32) * scale + attention_bias, axis=-1)
    if not BLOCK_MATH_FLOAT32:
        probs = tf.cast(probs, scores.dtype)
    return tf.cast(_dropout(probs, rate, bits), scores.dtype)


def attention_probs(scores: tf.Tensor, attention_bias: tf.Tensor, scale: float, rate: float,
                    seeds: SeedStream | None, training: bool) -> tf.Tensor:
    """dropout(softmax(scores * scale + attention_bias)) over the last axis, one fused block;
    scores [B, N, L, L] in the compute dtype, attention_bias float32, broadcastable."""
    return _attention_probs(scores, attention_bias, scale, rate,
                            _random_bits(tf.shape(scores), seeds, training, rate))


def sparse_softmax_cross_entropy(logits: tf.Tensor, labels: tf.Tensor) -> tf.Tensor:
    """-log softmax(logits)[labels] over the last axis, float32 [...] (the loss of a masked LM
    over the vocabulary), one fused block: TensorFlow's own kernel took 1.5x as long (1.7x the
    CPU time) forward and backward over ELECTRA-Small's [16, 19, 30522] generator logits
    (benchmarks/fused_block.py)."""
    if not FUSE_ELEMENTWISE:
        return tf.nn.sparse_softmax_cross_entropy_with_logits(
            labels=labels, logits=tf.cast(logits, tf.float32))
    return _cross_entropy_block(logits, labels)


@elementwise_block
def _cross_entropy_block(logits, labels):
    return _cross_entropy(logits, labels)


# The gradient written out: the automatic one's gather gradient reads its axis from the forward
# block's outputs, and XLA's constant analysis, needing that axis at compile time, then asked for
# every input of the block (the batch, the weights, the step) as a compile-time constant: with
# use_xla the step recompiled at every batch. The arithmetic is the automatic gradient's, op for
# op, so the numbers are unchanged.
@tf.custom_gradient
def _cross_entropy(logits, labels):
    wide = tf.cast(logits, tf.float32)
    log_norm = tf.reduce_logsumexp(wide, -1)
    losses = log_norm - tf.gather(wide, labels, batch_dims=labels.shape.rank)

    def gradient(upstream):
        # logsumexp's gradient as tf.reduce_logsumexp's ops give it (the shift by a finite max,
        # 1 / sum), then minus `upstream` at each label (the gather's gradient).
        wide = tf.cast(logits, tf.float32)
        top = tf.reduce_max(wide, -1, keepdims=True)
        shifted = tf.exp(wide - tf.where(tf.math.is_finite(top), top, tf.zeros_like(top)))
        per_row = upstream * tf.math.reciprocal(tf.reduce_sum(shifted, -1))
        at_label = tf.one_hot(labels, logits.shape[-1], dtype=tf.float32)
        grad = per_row[..., tf.newaxis] * shifted - upstream[..., tf.newaxis] * at_label
        return tf.cast(grad, logits.dtype), None

    return losses, gradient


def gelu(x: tf.Tensor) -> tf.Tensor:
    """Exact GELU, x * Phi(x) with the erf form, as the official ELECTRA code (and Hugging Face's
    "gelu") computes it."""
    cdf = 0.5 * (1.0 + tf.math.erf(x * tf.cast(1.0 / math.sqrt(2.0), x.dtype)))
    return x * cdf


def gelu_tanh(x: tf.Tensor) -> tf.Tensor:
    """GELU's tanh approximation (later BERT code; Hugging Face "gelu_new"), for imported models."""
    cdf = 0.5 * (1.0 + tf.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)))
    return x * cdf


ACTIVATIONS = {"gelu": gelu, "gelu_new": gelu_tanh, "relu": tf.nn.relu, "tanh": tf.tanh,
               "linear": None}


def get_activation(name: str | None):
    if name is None:
        return None
    key = name.lower()
    if key not in ACTIVATIONS:
        raise ValueError(f"unknown hidden_act {name!r}; expected one of {sorted(ACTIVATIONS)}")
    return ACTIVATIONS[key]


class Dense(tf.Module):
    """y = activation(x @ kernel + bias); kernel [in, out] as in the official checkpoints.

    `init` is "normal" (truncated, `stddev`: the official `create_initializer`) or
    "glorot_uniform" (where the official code calls `tf.layers.dense` without an initializer).
    """

    def __init__(self, in_dim: int, out_dim: int, name: str, activation: str | None = None,
                 stddev: float = 0.02, seed: int = 0, init: str = "normal",
                 seed_name: str | None = None):
        super().__init__(name=name.replace("/", "_"))
        self.kernel = create_variable(f"{name}/kernel", [in_dim, out_dim], init, stddev, seed,
                                      seed_name=seed_name and f"{seed_name}/kernel")
        self.bias = create_variable(f"{name}/bias", [out_dim], "zeros")
        self.activation = get_activation(activation)

    def __call__(self, x: tf.Tensor) -> tf.Tensor:
        """x: [..., in] in the compute dtype -> [..., out]."""
        kernel = tf.cast(self.kernel, x.dtype)
        if x.shape.rank == 2:
            y = tf.matmul(x, kernel)
        else:
            y = tf.tensordot(x, kernel, axes=1)
        if self.activation is gelu and BACKWARD_BLOCKS:
            return bias_gelu(y, self.bias)
        if self.activation is not None:
            return _bias_activation(y, self.bias, self.activation)
        return tf.nn.bias_add(y, tf.cast(self.bias, x.dtype))  # oneDNN fuses it into the matmul


@elementwise_block
def _bias_activation(y, bias, activation):
    z = _math(y)
    return tf.cast(activation(tf.nn.bias_add(z, tf.cast(bias, z.dtype))), y.dtype)


def bias_gelu(y: tf.Tensor, bias) -> tf.Tensor:
    """gelu(y + bias) in y's dtype, the FFN's activation, with its backward pass written out as
    one block as well: the gradient TensorFlow derives for the compiled forward block took 2.5-3x
    as long as this one (forward and backward over Small's [4096, 1024], float32 and bfloat16).
    The same derivative as automatic differentiation's, Phi(z) + z * phi(z), up to rounding."""
    return _with_backward_block(lambda y, bias: _bias_activation(y, bias, gelu),
                                _bias_gelu_backward, (y, bias))


@elementwise_block
def _bias_gelu_backward(upstream, y, bias):
    """(d/dy, d/dbias) of gelu(y + bias) given the upstream gradient; the math as the forward's."""
    z = _math(y)
    z = tf.nn.bias_add(z, tf.cast(bias, z.dtype))
    cdf = 0.5 * (1.0 + tf.math.erf(z * tf.cast(1.0 / math.sqrt(2.0), z.dtype)))
    pdf = tf.exp(-0.5 * tf.square(z)) * tf.cast(1.0 / math.sqrt(2.0 * math.pi), z.dtype)
    dz = tf.cast(upstream, z.dtype) * (cdf + z * pdf)
    dbias = tf.reduce_sum(tf.cast(dz, tf.float32), axis=list(range(dz.shape.rank - 1)))
    return tf.cast(dz, y.dtype), tf.cast(dbias, bias.dtype)


class LayerNorm(tf.Module):
    """LayerNorm over the last axis, computed in float32 for stability, eps 1e-12 like BERT."""

    def __init__(self, dim: int, name: str, epsilon: float = 1e-12):
        super().__init__(name=name.replace("/", "_"))
        self.gamma = create_variable(f"{name}/gamma", [dim], "ones")
        self.beta = create_variable(f"{name}/beta", [dim], "zeros")
        self.epsilon = epsilon

    def __call__(self, x: tf.Tensor) -> tf.Tensor:
        return _layer_norm_as(x, self.gamma, self.beta, self.epsilon)


@elementwise_block
def _layer_norm_as(x, gamma, beta, epsilon: float):
    """layer_norm in float32, the result in x's dtype."""
    return tf.cast(layer_norm(tf.cast(x, tf.float32), gamma, beta, epsilon), x.dtype)


def layer_norm(x: tf.Tensor, gamma, beta, epsilon: float) -> tf.Tensor:
    """(x - mean) / sqrt(var + epsilon) * gamma + beta over the last axis, float32.

    The backward pass is written out: automatic differentiation of the moments emits about twice
    as many elementwise ops, and a pre-training step spends a quarter of its time in such ops
    (a float32 step of ELECTRA-Small measured 7-8% faster with this; BENCHMARKS.md).
    """
    @tf.custom_gradient
    def forward(x, gamma, beta):
        mean, variance = tf.nn.moments(x, axes=[-1], keepdims=True)
        inv_std = tf.math.rsqrt(variance + epsilon)
        normed = (x - mean) * inv_std

        def backward(dy):
            dnormed = dy * gamma
            dx = inv_std * (dnormed - tf.reduce_mean(dnormed, -1, keepdims=True)
                            - normed * tf.reduce_mean(dnormed * normed, -1, keepdims=True))
            outer_axes = tf.range(tf.rank(dy) - 1)
            return (dx, tf.reduce_sum(dy * normed, outer_axes),
                    tf.reduce_sum(dy, outer_axes))

        return normed * gamma + beta, backward

    return forward(x, gamma, beta)

