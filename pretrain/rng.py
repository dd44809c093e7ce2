"""Stateless random numbers for pre-training, tied to (seed, step, purpose, example index).

Masking and generator sampling draw their noise from one Philox stream per (seed, step, purpose),
and example `i` of the global batch always reads the same slice of that stream, whichever replica
(or gradient-accumulation micro-batch) holds it. So:

- resuming needs no random-generator state: the step number is enough;
- one device, two mirrored replicas or two workers see identical masks and samples for the same
  global batch (only dropout, inside the encoder, is drawn per replica).

The slice is addressed through Philox's counter: each counter value yields 4 uint32, i.e. 4
float32 uniforms, so element `e` of the stream sits at counter e // 4, position e % 4. This holds
for the TF CPU kernels and under XLA (checked by tests/test_pretrain_masking.py). Both kernels
give the same Philox bits for a key and counter, but turn them into floats from different bits
(CPU: the low 23, XLA: the high 23), so the floats are made here from the bits, as the CPU kernel
makes them: the same numbers in graph mode as before, and the same numbers under XLA (use_xla,
TPUs), so a compiled step samples what the graph step samples.
"""
import tensorflow as tf

from util import stateless_random

# Purposes: each draws an independent stream for the same (seed, step).
MASK_POSITIONS = 1
MASK_REPLACE = 2
GUMBEL = 3

_PHILOX = 1  # tf.random.Algorithm.PHILOX


def stream_key(seed: int | tf.Tensor, step: tf.Tensor, purpose: int) -> tf.Tensor:
    """uint64 [1] Philox key for (seed, step, purpose)."""
    base = tf.stack([tf.cast(seed, tf.int64), tf.cast(step, tf.int64)])
    folded = stateless_random.fold_in(base, purpose, alg="philox")
    return stateless_random.full_range([1], folded, tf.uint64, alg="philox")


class ExampleRng:
    """Uniform noise for a slice of the global batch starting at `example_offset`.

    seed: python int or int scalar; step: int scalar (the optimizer step); example_offset: int
    scalar, index in the global batch of this slice's first example.
    """

    def __init__(self, seed, step, example_offset=0):
        self.seed = seed
        self.step = step
        self.example_offset = tf.cast(example_offset, tf.int64)

    def shifted(self, extra_offset) -> "ExampleRng":
        """The same streams for a sub-slice starting `extra_offset` examples later."""
        return ExampleRng(self.seed, self.step, self.example_offset + tf.cast(extra_offset, tf.int64))

    def uniform(self, shape, purpose: int) -> tf.Tensor:
        """float32 `shape` = [rows, ...] in [0, 1); row r is global example example_offset + r."""
        return unit_floats(self.bits(shape, purpose))

    def bits(self, shape, purpose: int) -> tf.Tensor:
        """uint32 `shape`: the random bits `uniform` makes its floats from (unit_floats), for a
        consumer that converts them inside its own fused block instead of in three more passes
        over memory."""
        shape = tf.cast(tf.stack(shape) if isinstance(shape, (list, tuple)) else shape, tf.int64)
        row_size = tf.reduce_prod(shape[1:])
        start = self.example_offset * row_size
        lead = start % 4  # the slice may start inside a counter block
        count = shape[0] * row_size
        counter = tf.stack([tf.bitcast(start // 4, tf.uint64), tf.constant(0, tf.uint64)])
        # Always 3 extra numbers, sliced at `lead`: the generated shape never depends on the
        # offset, so XLA compiles it even when the offset is not a compile-time constant
        # (micro-batches in a loop, replica ids).
        bits = tf.raw_ops.StatelessRandomUniformFullIntV2(
            shape=tf.reshape(count + 3, [1]), key=stream_key(self.seed, self.step, purpose),
            counter=counter, alg=_PHILOX, dtype=tf.uint32)
        return tf.reshape(tf.slice(bits, tf.reshape(lead, [1]), tf.reshape(count, [1])), shape)


def unit_floats(bits: tf.Tensor) -> tf.Tensor:
    """float32 uniforms in [0, 1) from uint32 `bits` as TensorFlow's CPU kernel makes them: the low
    23 bits as the mantissa of a number in [1, 2), minus 1; computed as mantissa * 2**-23, the
    same number exactly. (Written as the kernel's bit-cast and subtraction, the `- 1.0` met the
    Gumbel noise's `+ 1e-9` inside an XLA-compiled block, and XLA folded the two constants
    together: other numbers for about one element in 200.)"""
    mantissa = tf.bitwise.bitwise_and(bits, tf.constant(0x7FFFFF, tf.uint32))
    return tf.cast(mantissa, tf.float32) * (2.0 ** -23)
