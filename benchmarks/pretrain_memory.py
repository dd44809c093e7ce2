"""Peak memory of a pre-training step with and without recompute_grad / gradient accumulation.

Each configuration runs in its own child process (a fresh TensorFlow, so peaks do not mix): it
builds the real trainer (default ELECTRA-Base, seq 512, the official Base generator of 1/3 width),
runs --steps steps on synthetic tfrecords and reports its peak resident set size
(getrusage ru_maxrss, the whole process: weights, Adam slots, activations, TF's own arenas) and
its step time. The difference between rows is the activation memory the option saves.

  python benchmarks/pretrain_memory.py                         # Base, batch 8, seq 512
  python benchmarks/pretrain_memory.py --size small --seq-len 128 --batch 32
"""
import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import pretrain_throughput as pt  # noqa: E402

CONFIGS = [
    ("plain", {}),
    ("recompute_grad", {"recompute_grad": True}),
    ("accumulation 4", {"gradient_accumulation_steps": 4}),
    ("accumulation 4 + recompute_grad", {"gradient_accumulation_steps": 4,
                                         "recompute_grad": True}),
]


def child(args) -> None:
    common.set_threads(args.threads)
    extra = json.loads(args.child)
    work = tempfile.mkdtemp(prefix="pretrain_memory_")
    try:
        files = [pt.write_synthetic_tfrecords(work, args.seq_len, count=4 * args.batch)]
        hparams = pt.config_hparams(args.size, args.batch, args.seq_len, args.dtype, False,
                                    **extra)
        if args.size == "base":
            hparams["generator_hidden_size"] = 1.0 / 3.0  # Table 6 (Base)
        rss_built = None
        ours = pt.Ours("child", work, files, hparams, warmup=1)
        rss_built = common.max_rss_mb()
        ours.time_steps(args.steps, common.load_average())
        print(json.dumps({"max_rss_mb": common.max_rss_mb(), "rss_after_first_step_mb": rss_built,
                          "first_step_s": round(ours.first_step_s, 1),
                          "step_s_median": round(statistics.median(ours.times), 2),
                          "loss": round(ours.last_loss, 4)}))
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = common.arg_parser(__doc__, batch=8, size="base", seq_len=512)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--steps", type=int, default=2, help="timed steps after the first")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--configs", default="0,1,2,3",
                        help="indices into: " + "; ".join(f"{i} {n}" for i, (n, _) in
                                                          enumerate(CONFIGS)))
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        child(args)
        return

    machine = common.machine_summary()
    print(f"# machine: {machine['nproc']} cores, {machine['cpu']}; {machine['date']}; "
          f"load {common.load_average():.2f}", flush=True)
    rows = []
    for index in (int(i) for i in args.configs.split(",")):
        name, extra = CONFIGS[index]
        load = common.load_average()
        start = time.perf_counter()
        cmd = [sys.executable, os.path.abspath(__file__), "--child", json.dumps(extra),
               "--size", args.size, "--batch", str(args.batch), "--seq-len", str(args.seq_len),
               "--dtype", args.dtype, "--steps", str(args.steps), "--threads", str(args.threads)]
        try:
            result = common.child_json(cmd)
        except RuntimeError as e:
            result = {"error": str(e).splitlines()[-1][:300]}
        row = {"benchmark": "pretrain_peak_memory", "size": args.size, "batch": args.batch,
               "seq_len": args.seq_len, "dtype": args.dtype, "config": name, **extra, **result,
               "wall_s": round(time.perf_counter() - start, 1), "load_before": round(load, 2)}
        rows.append(row)
        common.emit(row)
    print()
    print(common.markdown_table(rows, [
        ("config", "configuration"), ("max_rss_mb", "peak RSS MB"),
        ("rss_after_first_step_mb", "peak after first step MB"),
        ("step_s_median", "step s (median)"), ("first_step_s", "first step s"),
        ("loss", "loss"), ("load_before", "load"), ("error", "error")]))


if __name__ == "__main__":
    main()
