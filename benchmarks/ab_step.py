"""A/B harness: variants of the pre-training step timed side by side in one process.

Each variant (VARIANTS below: the current code, or with one speed lever switched back off) is
built and traced under its own settings, then the variants' steps are timed one step at a time in
alternating order (ABC, CBA, ...), so a neighbour's load hits all of them alike; the figure to
read is the median of the per-step ratios against the first variant. Whole steps, real input
pipeline (pretrain_throughput.py's synthetic tfrecords), ELECTRA-Small by default.

  python benchmarks/ab_step.py --variants current,graph_elementwise --dtype bfloat16
  python benchmarks/ab_step.py --variants current,before --dtype float32 --pairs 30
  python benchmarks/ab_step.py --variants before,current --curve-steps 60   # numerics

With --curve-steps N it does not time anything: each variant trains N steps on real text (the
shared corpus) from the same initial weights and data, in float32 and bfloat16, beside the
first variant in float32 with another seed (the noise floor a changed numeric must stay
within).
"""
import contextlib
import importlib
import os
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import pretrain_throughput as pt  # noqa: E402

# Stands for tf.config.optimizer's experimental options in VARIANTS: (GRAPH_OPTIONS, option,
# value). They take effect when a function is instantiated for a call, so a variant holds them
# around its timed steps as well as while it is built.
GRAPH_OPTIONS = "@graph_options"

# name -> [(module or class path, attribute, value while the variant is built and traced)]
VARIANTS = {
    "current": [],
    # the elementwise blocks between matmuls as plain graph ops (model/layers.py)
    "graph_elementwise": [("model.layers", "FUSE_ELEMENTWISE", False)],
    # dropout masks from float32 uniforms instead of 16-bit numbers (model/layers.py)
    "float_dropout": [("model.layers", "DROPOUT_MASK_BITS", 32)],
    # the fused blocks' math in the activations' dtype instead of float32 (model/layers.py)
    "block_math_native": [("model.layers", "BLOCK_MATH_FLOAT32", False)],
    # the fused blocks' gradients derived by TensorFlow instead of written out (model/layers.py)
    "auto_block_gradients": [("model.layers", "BACKWARD_BLOCKS", False)],
    # the AdamW update as graph ops instead of one compiled pass per variable
    "graph_update": [("model.optimization", "FUSE_UPDATE", False)],
    # Grappler's graph rewrites on (run_pretraining.py runs without them; GRAPH_OPTIONS below)
    "graph_rewrites": [(GRAPH_OPTIONS, "disable_meta_optimizer", False)],
    # all four levers off at once
    "before": [("model.layers", "FUSE_ELEMENTWISE", False),
               ("model.layers", "DROPOUT_MASK_BITS", 32),
               ("model.layers", "BLOCK_MATH_FLOAT32", False),
               ("model.optimization", "FUSE_UPDATE", False)],
}


def _resolve(path: str):
    module, _, attr = path.rpartition(".")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError):
        return importlib.import_module(path)


@contextlib.contextmanager
def variant(name: str):
    """The settings of variant `name` in place while a step is built and traced, then restored."""
    import tensorflow as tf
    options = {attr: value for path, attr, value in VARIANTS[name] if path == GRAPH_OPTIONS}
    targets = [(_resolve(path), attr, value) for path, attr, value in VARIANTS[name]
               if path != GRAPH_OPTIONS]
    saved = [(obj, attr, getattr(obj, attr)) for obj, attr, _ in targets]
    saved_options = tf.config.optimizer.get_experimental_options()
    for obj, attr, value in targets:
        setattr(obj, attr, value)
    if options:
        tf.config.optimizer.set_experimental_options(options)
    try:
        yield
    finally:
        for obj, attr, value in reversed(saved):
            setattr(obj, attr, value)
        if options:
            tf.config.optimizer.set_experimental_options(saved_options)


def compare_curves(args, names: list[str], work: str) -> None:
    """Loss curves of each variant (float32 and bfloat16, seed 0) and of the first variant in
    float32 with seed 1; mean |difference| to the first variant's float32 curve."""
    files = pt.real_text_files(work, args.seq_len)
    if files is None:
        return
    runs = [(names[0], "float32", 1)] + [(n, d, 0) for n in names for d in ("float32", "bfloat16")]
    curves = {}
    for name, dtype, seed in runs:
        with variant(name):
            trainer = pt.build_trainer(os.path.join(work, "real"), pt.curve_hparams(args, dtype, seed))
            curves[(name, dtype, seed)] = pt.train_losses(trainer, files, args.curve_steps)
        print(f"# curve {name} {dtype} seed {seed}: "
              + " ".join(f"{x:.2f}" for x in curves[(name, dtype, seed)]), flush=True)
    ref = curves[(names[0], "float32", 0)]
    tail = max(1, args.curve_steps // 4)
    rows = []
    for (name, dtype, seed), losses in curves.items():
        row = {"benchmark": "ab_pretrain_curve", "variant": name, "dtype": dtype, "seed": seed,
               "steps": args.curve_steps,
               "mean_abs_diff_vs_ref": round(statistics.fmean(
                   abs(a - b) for a, b in zip(losses, ref)), 4),
               "last_quarter_mean_loss": round(statistics.fmean(losses[-tail:]), 4),
               "every_5th": [round(x, 2) for x in losses[4::5]]}
        rows.append(row)
        common.emit(row)
    print(f"\nLoss (MLM + 50 x RTD) on real text, {args.curve_steps} steps; reference: "
          f"{names[0]} float32 seed 0; the seed-1 row is the noise floor")
    print(common.markdown_table(rows, [
        ("variant", "variant"), ("dtype", "dtype"), ("seed", "seed"),
        ("mean_abs_diff_vs_ref", "mean |diff| vs ref"),
        ("last_quarter_mean_loss", "last-quarter mean loss")]))


def main() -> None:
    parser = common.arg_parser(__doc__, batch=16)
    parser.add_argument("--variants", default="current,before",
                        help=f"comma-separated, the first is the reference; known: "
                             f"{', '.join(VARIANTS)}")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--pairs", type=int, default=20, help="timed steps per variant")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--hparams", default="{}")
    parser.add_argument("--curve-steps", type=int, default=0,
                        help="compare the variants' loss curves on real text instead of speed")
    args = parser.parse_args()
    names = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = sorted(set(names) - set(VARIANTS))
    if unknown:
        parser.error(f"unknown variants {unknown}; known: {sorted(VARIANTS)}")

    common.set_threads(args.threads)
    from util import training_utils
    from util.hparams import parse_hparams_arg
    training_utils.run_as_the_commands_run()  # as run_pretraining.py runs its graphs
    machine = common.print_machine()
    work = tempfile.mkdtemp(prefix="ab_step_")
    try:
        if args.curve_steps:
            compare_curves(args, names, work)
            return
        files = [pt.write_synthetic_tfrecords(work, args.seq_len)]
        hparams = pt.config_hparams(args.size, args.batch, args.seq_len, args.dtype, False,
                                    **parse_hparams_arg(args.hparams))
        built = {}
        for name in names:
            with variant(name):
                built[name] = pt.Ours(name, work, files, hparams, args.warmup)
            print(f"# built {name}: first step {built[name].first_step_s:.1f} s", flush=True)
        wall = {n: [] for n in names}
        cpu = {n: [] for n in names}
        loads = [common.load_average()]
        for i in range(args.pairs):
            for name in (names if i % 2 == 0 else names[::-1]):
                ours = built[name]
                with variant(name):  # its graph options hold for its calls too
                    c, start = common.cpu_seconds(), time.perf_counter()
                    result = ours.trainer.train_steps(ours.iterator, 1)
                    wall[name].append(time.perf_counter() - start)
                    cpu[name].append(common.cpu_seconds() - c)
                if not result.finite:
                    raise RuntimeError(f"{name}: non-finite step {result.bad_metrics}")
        loads.append(common.load_average())
        ref = names[0]
        rows = []
        for name in names:
            row = {"benchmark": "ab_pretrain_step", "variant": name, "dtype": args.dtype,
                   "size": args.size, "batch": args.batch, "seq_len": args.seq_len,
                   "steps": args.pairs,
                   "step_ms_median": round(statistics.median(wall[name]) * 1e3, 1),
                   "step_ms_min": round(min(wall[name]) * 1e3, 1),
                   "cpu_ms_median": round(statistics.median(cpu[name]) * 1e3, 1),
                   "ratio_vs_ref": round(statistics.median(
                       a / b for a, b in zip(wall[name], wall[ref])), 3),
                   "cpu_ratio_vs_ref": round(statistics.median(
                       a / b for a, b in zip(cpu[name], cpu[ref])), 3),
                   "sequences_per_sec": round(args.batch / statistics.median(wall[name]), 2),
                   "load_before_after": loads}
            rows.append(row)
            common.emit(row)
        print(f"\nELECTRA-{args.size} pre-training step, {args.dtype}, batch {args.batch}, seq "
              f"{args.seq_len}; {args.pairs} steps per variant, alternating; ratios are medians "
              f"of per-step ratios against {ref} (< 1 = faster)")
        print(common.markdown_table(rows, [
            ("variant", "variant"), ("step_ms_median", "step ms (median)"),
            ("step_ms_min", "min ms"), ("ratio_vs_ref", f"x {ref} (wall)"),
            ("cpu_ms_median", "CPU ms (median)"), ("cpu_ratio_vs_ref", f"x {ref} (CPU)"),
            ("sequences_per_sec", "seq/s"), ("load_before_after", "load")]))
        common.print_machine_end(machine)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
