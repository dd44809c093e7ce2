"""The elementwise blocks of model/layers.py timed alone, in each setting of its speed levers.

1. One Transformer sub-layer's end, dropout + residual + LayerNorm on [B*L, H]: as plain graph
   ops or compiled by XLA (FUSE_ELEMENTWISE), masks from float uniforms or 16-bit numbers
   (DROPOUT_MASK_BITS); forward only.
2. The FFN's bias + GELU on [B*L, 4H] (forward, and forward + backward): as graph ops, compiled
   with the math in the activations' dtype, compiled with the math in float32
   (BLOCK_MATH_FLOAT32; the same in float32). The backward pass is TensorFlow's gradient of
   the forward block, not the written-out backward block the model uses (`layers.bias_gelu`,
   BACKWARD_BLOCKS): forward and backward 8-11 ms with it against 25.5 ms here ([4096, 1024]
   bfloat16, an Intel AMX host, 2026-12-01).
3. Gumbel-max sampling of the generator's tokens, [16, 19, 30,522] (Small's masked positions,
   vocabulary of the shared data): as graph ops, the perturbation compiled by XLA with the
   argmax in the graph (pretrain/masking.py), all of it compiled by XLA.
4. The generator's masked-LM loss over the same logits, forward + backward: TensorFlow's
   sparse softmax cross-entropy kernel against the fused block (model/layers.py
   `sparse_softmax_cross_entropy`).
Wall and CPU time per call, median of --calls after warm-up.

  python benchmarks/fused_block.py                      # [2048, 256] bfloat16 (Small, b16 s128)
  python benchmarks/fused_block.py --rows 4096 --hidden 768 --dtype float32
"""
import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=2048)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    args = parser.parse_args()
    common.set_threads(args.threads)
    from model import layers
    machine = common.print_machine()

    def timed(fn, *fn_args):
        return _timed(args.calls, fn, *fn_args)

    saved = layers.FUSE_ELEMENTWISE, layers.DROPOUT_MASK_BITS, layers.BLOCK_MATH_FLOAT32
    try:
        norm_rows = _norm_rows(args, timed)
        layers.DROPOUT_MASK_BITS = saved[1]
        gelu_rows = _gelu_rows(args, timed)
        sample_rows = _sampling_rows(timed) + _loss_rows(timed)
    finally:
        layers.FUSE_ELEMENTWISE, layers.DROPOUT_MASK_BITS, layers.BLOCK_MATH_FLOAT32 = saved
    _print_tables(args, norm_rows, gelu_rows, sample_rows)
    common.print_machine_end(machine)


def _timed(calls: int, fn, *fn_args) -> dict:
    """Median wall and CPU milliseconds of `calls` calls after 5 warm-up ones."""
    import tensorflow as tf

    for _ in range(5):
        tf.nest.map_structure(lambda t: t.numpy(), fn(*fn_args))
    wall, cpu = [], []
    for _ in range(calls):
        c, start = common.cpu_seconds(), time.perf_counter()
        tf.nest.map_structure(lambda t: t.numpy(), fn(*fn_args))
        wall.append(time.perf_counter() - start)
        cpu.append(common.cpu_seconds() - c)
    return {"wall_ms_median": round(statistics.median(wall) * 1e3, 2),
            "cpu_ms_median": round(statistics.median(cpu) * 1e3, 2),
            "load": round(common.load_average(), 2)}


def _norm_rows(args: argparse.Namespace, timed) -> list[dict]:
    """1. dropout + residual + LayerNorm, graph ops or compiled, 32- or 16-bit masks."""
    import tensorflow as tf
    from model import layers

    shape = [args.rows, args.hidden]
    y = tf.cast(tf.random.stateless_normal(shape, seed=[1, 2]), args.dtype)
    x = tf.cast(tf.random.stateless_normal(shape, seed=[1, 3]), args.dtype)
    norm = layers.LayerNorm(args.hidden, "block/LayerNorm")
    seed = tf.constant([3, 4], tf.int64)
    rows = []
    for fuse in (False, True):
        for bits in (32, 16):
            layers.FUSE_ELEMENTWISE, layers.DROPOUT_MASK_BITS = fuse, bits
            fn = tf.function(lambda y, x, seed: layers.dropout_add_norm(
                y, x, norm, 0.1, layers.SeedStream(seed), training=True))
            row = {"benchmark": "dropout_add_norm_block", "rows": args.rows,
                   "hidden": args.hidden, "dtype": args.dtype,
                   "block": "fused (XLA)" if fuse else "graph ops", "mask_bits": bits,
                   **timed(fn, y, x, seed)}
            rows.append(row)
            common.emit(row)
    return rows


def _gelu_rows(args: argparse.Namespace, timed) -> list[dict]:
    """2. the FFN's bias + GELU, forward and forward + backward, in each block setting."""
    import tensorflow as tf
    from model import layers

    ffn = layers.Dense(args.hidden, 4 * args.hidden, "block/ffn", activation="gelu")
    h = tf.cast(tf.random.stateless_normal([args.rows, 4 * args.hidden], seed=[1, 4]),
                args.dtype)

    def forward_backward(h):
        with tf.GradientTape() as tape:
            tape.watch(h)
            out = layers._bias_activation(h, ffn.bias, layers.gelu)
        return out, tape.gradient(out, [h, ffn.bias], output_gradients=tf.ones_like(out))

    rows = []
    for fuse, math32, block in ((False, True, "graph ops"),
                                (True, False, "fused, math in the activations' dtype"),
                                (True, True, "fused, math in float32")):
        layers.FUSE_ELEMENTWISE, layers.BLOCK_MATH_FLOAT32 = fuse, math32
        row = {"benchmark": "bias_gelu_block", "rows": args.rows,
               "width": 4 * args.hidden, "dtype": args.dtype, "block": block}
        for part, fn in (("forward", lambda h: layers._bias_activation(h, ffn.bias,
                                                                       layers.gelu)),
                         ("forward_backward", forward_backward)):
            row[part] = timed(tf.function(fn), h)
        rows.append(row)
        common.emit(row)
    return rows


def _sampling_logits():
    import tensorflow as tf

    return tf.random.stateless_normal([16, 19, 30522], seed=[1, 5]) * 3.0


def _sampling_rows(timed) -> list[dict]:
    """3. Gumbel-max sampling of the generator's tokens."""
    import tensorflow as tf
    from model import layers
    from pretrain import masking

    logits = _sampling_logits()
    noise = tf.random.stateless_uniform([16, 19, 30522], seed=[1, 6])
    rows = []
    for fuse, jit, how in ((False, False, "graph ops"),
                           (True, False, "perturbation fused, argmax in the graph"),
                           (True, True, "all compiled by XLA")):
        layers.FUSE_ELEMENTWISE = fuse
        fn = tf.function(masking.sample_from_softmax, jit_compile=jit, autograph=False)
        row = {"benchmark": "gumbel_sampling", "shape": [16, 19, 30522], "how": how,
               **timed(fn, logits, noise)}
        rows.append(row)
        common.emit(row)
    return rows


def _loss_rows(timed) -> list[dict]:
    """4. the masked-LM loss, forward + backward: TensorFlow's kernel or the fused block."""
    import tensorflow as tf
    from model import layers

    logits = _sampling_logits()
    labels = tf.random.stateless_uniform([16, 19], seed=[1, 7], maxval=30522, dtype=tf.int32)

    def loss_and_gradient(logits, labels):
        with tf.GradientTape() as tape:
            tape.watch(logits)
            loss = tf.reduce_sum(layers.sparse_softmax_cross_entropy(logits, labels))
        return loss, tape.gradient(loss, logits)

    rows = []
    for fuse, how in ((False, "TensorFlow's kernel"), (True, "fused block")):
        layers.FUSE_ELEMENTWISE = fuse
        row = {"benchmark": "masked_lm_loss", "shape": [16, 19, 30522], "how": how,
               **timed(tf.function(loss_and_gradient), logits, labels)}
        rows.append(row)
        common.emit(row)
    return rows


def _print_tables(args: argparse.Namespace, norm_rows: list, gelu_rows: list,
                  sample_rows: list) -> None:
    print(f"\ndropout + residual + LayerNorm on [{args.rows}, {args.hidden}] {args.dtype}, "
          f"median of {args.calls} calls")
    print(common.markdown_table(norm_rows, [
        ("block", "block"), ("mask_bits", "mask bits"), ("wall_ms_median", "wall ms"),
        ("cpu_ms_median", "CPU ms"), ("load", "load")]))
    print(f"\nbias + GELU on [{args.rows}, {4 * args.hidden}] {args.dtype}, median of "
          f"{args.calls} calls")
    for row in gelu_rows:
        for part in ("forward", "forward_backward"):
            row[f"{part}_ms"] = f"{row[part]['wall_ms_median']} / {row[part]['cpu_ms_median']}"
    print(common.markdown_table(gelu_rows, [
        ("block", "block"), ("forward_ms", "forward wall / CPU ms"),
        ("forward_backward_ms", "forward + backward wall / CPU ms")]))
    print(f"\nGumbel-max sampling, and the masked-LM loss forward + backward, over [16, 19, "
          f"30522] float32 logits, median of {args.calls} calls")
    print(common.markdown_table(sample_rows, [
        ("benchmark", "benchmark"), ("how", "how"), ("wall_ms_median", "wall ms"),
        ("cpu_ms_median", "CPU ms"),
        ("load", "load")]))


if __name__ == "__main__":
    main()
