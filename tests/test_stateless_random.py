"""util/stateless_random.py: TensorFlow's stateless draws, the same numbers, traced once."""
import numpy as np
import tensorflow as tf

from model import layers
from util import stateless_random


def test_the_same_numbers_as_tensorflows_own_calls():
    seed = tf.constant([7, 11], tf.int64)
    pairs = [
        (stateless_random.uniform([3, 5], seed),
         tf.random.stateless_uniform([3, 5], seed=seed, alg="philox")),
        (stateless_random.full_range(tf.constant([9]), seed, tf.uint32),
         tf.random.stateless_uniform([9], seed=seed, minval=None, maxval=None, dtype=tf.uint32,
                                     alg="philox")),
        (stateless_random.full_range([1], seed, tf.uint64),
         tf.random.stateless_uniform([1], seed=seed, minval=None, maxval=None, dtype=tf.uint64,
                                     alg="philox")),
        (stateless_random.fold_in(seed, 3),
         tf.random.experimental.stateless_fold_in(seed, 3, alg="philox")),
        (stateless_random.fold_in(seed, tf.constant(5), alg="auto_select"),
         tf.random.experimental.stateless_fold_in(seed, tf.constant(5))),
    ]
    for got, expected in pairs:
        assert got.dtype == expected.dtype
        np.testing.assert_array_equal(got.numpy(), expected.numpy())
    # A shape known while tracing keeps its static shape.
    assert stateless_random.uniform([3, 5], seed).shape == [3, 5]


def test_a_steps_draws_are_calls_not_inline_ops():
    """Each dropout mask is one call of a function traced once, not the seed-scrambling ops of
    tf.random.stateless_uniform built again for every layer."""
    @tf.function(autograph=False)
    def step(x, seed):
        seeds = layers.SeedStream(seed)
        for _ in range(6):  # one mask per "layer"
            x = layers.dropout(x, 0.1, seeds, training=True)
        return x

    graph = step.get_concrete_function(tf.TensorSpec([4, 8]),
                                       tf.TensorSpec([2], tf.int64)).graph
    types = [op.type for op in graph.get_operations()]
    assert "StatelessRandomUniformFullIntV2" not in types  # none inline
    assert sum(t in ("PartitionedCall", "StatefulPartitionedCall") for t in types) >= 7
    assert len(types) < 200, len(types)  # about 45 ops per mask inline
