"""Speed levers measured and not kept (BENCHMARKS.md, "Tried and not kept"), timed again on demand.

1. Attention as `tf.einsum` over [B, L, N, d] (no explicit head transposes) against the model's
   reshape + transpose + batched matmul (model/modeling.py TransformerLayer): scores, softmax
   and context, forward + backward.
2. One random draw per layer for its three dropout masks (attention probabilities, attention
   output, FFN output), sliced, against three draws (model/layers.py `_random_bits`): the 16-bit
   numbers of 12 layers of ELECTRA-Small at batch 16, seq 128.
3. An XLA-compiled elementwise block (bias + GELU on [2048, 1024]) on 1 thread and on 2: whether
   XLA's CPU kernels use the second core.
Median wall time of --calls calls after warm-up (outputs copied to the host, as a step's are not).

  python benchmarks/rejected_levers.py
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


def median_ms(fn, args, calls: int) -> float:
    return round(common.median_call_ms(fn, args, calls), 2)


def attention_layouts(calls: int) -> list[dict]:
    import tensorflow as tf
    b, l, n, d = 16, 128, 4, 64
    q2, k2, v2 = (tf.cast(tf.random.stateless_normal([b * l, n * d], seed=[1, i]), tf.bfloat16)
                  for i in range(3))

    def transposed(q2, k2, v2):
        def split(t):
            return tf.transpose(tf.reshape(t, [b, l, n, d]), [0, 2, 1, 3])
        probs = tf.nn.softmax(tf.matmul(split(q2), split(k2), transpose_b=True))
        return tf.reshape(tf.transpose(tf.matmul(probs, split(v2)), [0, 2, 1, 3]), [b * l, n * d])

    def einsum(q2, k2, v2):
        q, k, v = (tf.reshape(t, [b, l, n, d]) for t in (q2, k2, v2))
        probs = tf.nn.softmax(tf.einsum("blnd,bmnd->bnlm", q, k))
        return tf.reshape(tf.einsum("bnlm,bmnd->blnd", probs, v), [b * l, n * d])

    def with_gradients(attend):
        @tf.function
        def run(q2, k2, v2):
            with tf.GradientTape() as tape:
                tape.watch([q2, k2, v2])
                out = attend(q2, k2, v2)
            return tape.gradient(out, [q2, k2, v2], output_gradients=tf.ones_like(out))
        return run

    return [{"benchmark": "attention_layout", "how": how, "shape": [b, n, l, d],
             "wall_ms_median": median_ms(with_gradients(fn), (q2, k2, v2), calls)}
            for how, fn in (("reshape + transpose + matmul (kept)", transposed),
                            ("einsum", einsum))]


def dropout_draws(calls: int) -> list[dict]:
    import tensorflow as tf
    # uint32 words (two 16-bit numbers each) per layer: probs [16, 4, 128, 128], 2 x [2048, 256]
    sizes = [16 * 4 * 128 * 128 // 2, 2048 * 256 // 2, 2048 * 256 // 2]

    def draw(count, seed):
        return tf.random.stateless_uniform([count], seed=seed, minval=None, maxval=None,
                                           dtype=tf.uint32, alg="philox")

    def checksum(parts):  # touches every part without reading it whole
        return tf.add_n([tf.reduce_sum(tf.cast(p[:8], tf.int64)) for p in parts])

    @tf.function
    def three_draws(seed):
        parts = []
        for layer in range(12):
            s = tf.random.experimental.stateless_fold_in(seed, layer, alg="philox")
            parts += [draw(size, s + i) for i, size in enumerate(sizes)]
        return checksum(parts)

    @tf.function
    def one_draw(seed):
        parts = []
        for layer in range(12):
            flat = draw(sum(sizes), tf.random.experimental.stateless_fold_in(seed, layer,
                                                                              alg="philox"))
            parts += [flat[:sizes[0]], flat[sizes[0]:sizes[0] + sizes[1]],
                      flat[sizes[0] + sizes[1]:]]
        return checksum(parts)

    seed = tf.constant([1, 2], tf.int64)
    return [{"benchmark": "dropout_draws", "how": how, "layers": 12,
             "wall_ms_median": median_ms(fn, (seed,), calls)}
            for how, fn in (("three draws per layer (kept)", three_draws),
                            ("one draw per layer, sliced", one_draw))]


def xla_threads(calls: int, threads: int) -> dict:
    import tensorflow as tf
    from model import layers
    h = tf.cast(tf.random.stateless_normal([2048, 1024], seed=[1, 7]), tf.bfloat16)
    bias = tf.zeros([1024])
    fn = tf.function(lambda h: layers._bias_activation(h, bias, layers.gelu))
    return {"benchmark": "xla_block_threads", "threads": threads,
            "wall_ms_median": median_ms(fn, (h,), calls)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=40)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--child-threads", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child_threads:  # part 3 in a process of its own: threads are set once per process
        common.set_threads(args.child_threads)
        common.emit(xla_threads(args.calls, args.child_threads))
        return
    common.set_threads(args.threads)
    machine = common.print_machine()
    rows = attention_layouts(args.calls) + dropout_draws(args.calls)
    for threads in (1, 2):
        rows.append(common.child_json([sys.executable, os.path.abspath(__file__),
                                       "--calls", str(args.calls),
                                       "--child-threads", str(threads)]))
    for row in rows:
        row.setdefault("how", f"XLA bias + GELU block, {row.get('threads')} thread(s)")
        common.emit(row)
    print(common.markdown_table(rows, [("benchmark", "benchmark"), ("how", "how"),
                                       ("wall_ms_median", "wall ms")]))
    common.print_machine_end(machine)


if __name__ == "__main__":
    main()
