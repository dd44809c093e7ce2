"""The fine-tuning step's matmuls alone: how fast the whole step could be if nothing else cost time.

Times every matmul of one ELECTRA-Small fine-tuning step (the encoder at batch x seq tokens;
sequence classification, whose head is negligible) one shape at a time, each on its own in a
tf.function on the same threads as the step: the forward products (Q, K, V, attention output,
FFN in and out; attention scores and context as batched matmuls over the heads), and for each
its two gradients as TensorFlow's gradient of MatMul computes them (dX = dY W^T with
transpose_b, dW = X^T dY with transpose_a), less the cost of calling a function that does
nothing, the best of --passes passes. The sum over 12 layers (plus the embedding projection) is
the floor the step's matmuls put under it at their isolated speed, in the dtype given. The peer's step in the same dtype (hf_finetune_bench.py, bfloat16 under autocast)
is measured in the same run, after the matmuls: the step a ratio to it allows, and what that
leaves for everything that is not a matmul (the whole step: finetune_throughput.py).

  python benchmarks/matmul_floor.py                      # Small, batch 32, seq 128, bf16 + fp32
  python benchmarks/matmul_floor.py --dtypes bfloat16 --no-peer
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

LAYERS = 12  # ELECTRA-Small


def step_matmuls(batch: int, seq: int, hidden: int, ffn: int, heads: int, embedding: int):
    """(name, count per step, a's shape, b's shape, transpose_a, transpose_b, FLOPs) of each
    matmul."""
    tokens, head = batch * seq, hidden // heads
    dense = [("qkv_and_output", 4 * LAYERS, tokens, hidden, hidden),
             ("ffn_in", LAYERS, tokens, hidden, ffn), ("ffn_out", LAYERS, tokens, ffn, hidden),
             ("embedding_projection", 1, tokens, embedding, hidden)]
    rows = []
    for name, count, m, k, n in dense:  # a forward product and its gradients: the same FLOPs
        flops = 2 * m * k * n
        rows.append((f"{name} forward", count, (m, k), (k, n), False, False, flops))
        rows.append((f"{name} dX", count, (m, n), (k, n), False, True, flops))
        rows.append((f"{name} dW", count, (m, k), (m, n), True, False, flops))
    bh = batch * heads  # scores S = Q K^T, context = P V; each has two gradients
    flops = 2 * bh * seq * seq * head
    rows += [("scores forward", LAYERS, (bh, seq, head), (bh, seq, head), False, True, flops),
             ("scores dQ", LAYERS, (bh, seq, seq), (bh, seq, head), False, False, flops),
             ("scores dK", LAYERS, (bh, seq, seq), (bh, seq, head), True, False, flops),
             ("context forward", LAYERS, (bh, seq, seq), (bh, seq, head), False, False, flops),
             ("context dP", LAYERS, (bh, seq, head), (bh, seq, head), False, True, flops),
             ("context dV", LAYERS, (bh, seq, seq), (bh, seq, head), True, False, flops)]
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--dtypes", default="bfloat16,float32")
    parser.add_argument("--calls", type=int, default=30)
    parser.add_argument("--passes", type=int, default=3, help="passes over the shapes")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--no-peer", action="store_true")
    args = parser.parse_args()
    common.set_threads(args.threads)
    import tensorflow as tf
    machine = common.print_machine()
    for dtype in args.dtypes.split(","):
        limit = common.matmul_limit(dtype)
        total_ms, total_flops = 0.0, 0
        # A call's own cost (dispatch, the scalar back to Python), taken off every matmul's time.
        tiny = tf.cast(tf.ones([8, 8]), dtype)
        nothing = tf.function(lambda x: tf.reduce_sum(tf.cast(x[:1, :1], tf.float32)))
        overhead = common.median_call_ms(nothing, (tiny,), args.calls)
        print(f"\n{dtype}: 2048^3 matmul limit {limit:.0f} GFLOP/s; a call's own cost "
              f"{overhead:.3f} ms, taken off each time below\n")
        print("| matmul | per step | ms each | GFLOP/s | ms per step |\n|---|---|---|---|---|")
        shapes = step_matmuls(args.batch, args.seq_len, 256, 1024, 4, 128)
        best = {}
        for _ in range(args.passes):  # the host's speed drifts: each shape's best pass counts
            for name, count, a_shape, b_shape, ta, tb, _ in shapes:
                a = tf.cast(tf.random.stateless_normal(a_shape, seed=[1, 2]), dtype)
                b = tf.cast(tf.random.stateless_normal(b_shape, seed=[3, 4]), dtype)
                fn = tf.function(lambda x, y, ta=ta, tb=tb: tf.reduce_sum(tf.cast(
                    tf.matmul(x, y, transpose_a=ta, transpose_b=tb)[..., :1, :1], tf.float32)))
                ms = common.median_call_ms(fn, (a, b), args.calls) - overhead
                best[name] = min(best.get(name, ms), ms)
        for name, count, a_shape, b_shape, _, _, flops in shapes:
            ms = best[name]
            total_ms += count * ms
            total_flops += count * flops
            print(f"| {name} {a_shape}x{b_shape} | {count} | {ms:.2f} | {flops / ms / 1e6:.0f} | "
                  f"{count * ms:.0f} |")
        print(f"\n{dtype}: the step's matmuls alone {total_ms:.0f} ms ({total_flops / 1e9:.0f} "
              f"GFLOP, {total_flops / total_ms / 1e6:.0f} GFLOP/s = "
              f"{total_flops / total_ms / 1e6 / limit:.0%} of the limit)")
        if common.use_peer(args.no_peer):
            flags = ["--bf16"] if dtype == "bfloat16" else []
            peer_ms = common.run_peer("hf_finetune_bench.py", [
                "--size", "small", "--batch", args.batch, "--seq-len", args.seq_len,
                "--steps", 10, "--warmup", 3, "--threads", args.threads, *flags])["step_ms_median"]
            for ratio in (1.2, 1.5, 2.0):
                budget = peer_ms / ratio
                print(f"  {ratio}x the peer's {dtype} step ({peer_ms:.0f} ms, measured now) is a "
                      f"{budget:.0f} ms step: {budget - total_ms:.0f} ms left for all but "
                      f"the matmuls")
    common.print_machine_end(machine)


if __name__ == "__main__":
    main()
