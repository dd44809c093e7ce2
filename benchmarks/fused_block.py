"""One Transformer sub-layer's end, dropout + residual + LayerNorm on [B*L, H], timed alone in
each setting of the two dropout levers of model/layers.py: the block as plain graph ops or
compiled by XLA (FUSE_ELEMENTWISE), masks from float uniforms or 16-bit numbers
(DROPOUT_MASK_BITS). Wall and CPU time per call, median of --calls after warm-up.

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
    import tensorflow as tf
    from model import layers
    machine = common.print_machine()
    shape = [args.rows, args.hidden]
    y = tf.cast(tf.random.stateless_normal(shape, seed=[1, 2]), args.dtype)
    x = tf.cast(tf.random.stateless_normal(shape, seed=[1, 3]), args.dtype)
    norm = layers.LayerNorm(args.hidden, "block/LayerNorm")
    rows = []
    saved = layers.FUSE_ELEMENTWISE, layers.DROPOUT_MASK_BITS
    try:
        for fuse in (False, True):
            for bits in (32, 16):
                layers.FUSE_ELEMENTWISE, layers.DROPOUT_MASK_BITS = fuse, bits
                fn = tf.function(lambda y, x, seed: layers.dropout_add_norm(
                    y, x, norm, 0.1, layers.SeedStream(seed), training=True))
                seed = tf.constant([3, 4], tf.int64)
                for _ in range(5):
                    fn(y, x, seed).numpy()
                wall, cpu = [], []
                for _ in range(args.calls):
                    c, start = common.cpu_seconds(), time.perf_counter()
                    fn(y, x, seed).numpy()
                    wall.append(time.perf_counter() - start)
                    cpu.append(common.cpu_seconds() - c)
                row = {"benchmark": "dropout_add_norm_block", "rows": args.rows,
                       "hidden": args.hidden, "dtype": args.dtype,
                       "block": "fused (XLA)" if fuse else "graph ops",
                       "mask_bits": bits, "wall_ms_median": round(statistics.median(wall) * 1e3, 2),
                       "cpu_ms_median": round(statistics.median(cpu) * 1e3, 2),
                       "load": round(common.load_average(), 2)}
                rows.append(row)
                common.emit(row)
    finally:
        layers.FUSE_ELEMENTWISE, layers.DROPOUT_MASK_BITS = saved
    print(f"\ndropout + residual + LayerNorm on [{args.rows}, {args.hidden}] {args.dtype}, "
          f"median of {args.calls} calls")
    print(common.markdown_table(rows, [("block", "block"), ("mask_bits", "mask bits"),
                                       ("wall_ms_median", "wall ms"), ("cpu_ms_median", "CPU ms"),
                                       ("load", "load")]))
    common.print_machine_end(machine)


if __name__ == "__main__":
    main()
