"""Where a pre-training (or fine-tuning) step spends its time: a tf.profiler trace, summarised.

Runs a few steps of the real step under `tf.profiler.experimental`, reads the trace (the XSpace
protobuf TensorFlow writes; no TensorBoard needed) and sums the op kernels' time on the host
threads by op type and by phase (forward, backward, clipping, optimizer). Times are
kernel CPU time summed over threads (2 threads busy = 2 s per wall second), so shares are what
to read; the wall time per step is printed too.

  python benchmarks/profile_step.py                              # Small b16 s128 float32
  python benchmarks/profile_step.py --dtype bfloat16 --top 25
  python benchmarks/profile_step.py --finetune --batch 32 --dtype bfloat16   # classification
"""
import collections
import glob
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import pretrain_throughput as pt  # noqa: E402

XLA_EVENT = "CpuExecutable:"  # "CpuExecutable::ExecuteAsyncOnStream" split at its last ":"


def part_of(name: str) -> str:
    """Which phase an op belongs to, from its name in the traced train loop.

    The model's ops carry no module scopes, so the split is by phase: the gradient tape names
    backward ops. XLA's executions carry no op name: they are their own part (the compiled
    elementwise blocks of both passes and, for models with a large variable, the AdamW
    updates); a tiny model's uncompiled updates count as forward.
    """
    if name == XLA_EVENT:
        return "XLA-compiled (elementwise blocks, AdamW updates)"
    if "gradient_tape" in name:
        return "backward"
    if "global_norm" in name:
        return "clipping"
    return "forward (masking, sampling, losses)"


def summarise_trace(logdir: str):
    """(seconds by op type, by phase, by op name, total) over the host op events of the trace."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2
    paths = glob.glob(os.path.join(logdir, "**", "*.xplane.pb"), recursive=True)
    if not paths:
        raise RuntimeError(f"no trace written under {logdir}")
    space = xplane_pb2.XSpace()
    with open(paths[0], "rb") as f:
        space.ParseFromString(f.read())
    by_type, by_part, by_name = collections.Counter(), collections.Counter(), collections.Counter()
    total = 0.0
    for plane in space.planes:
        if not plane.name.startswith("/host:CPU"):
            continue
        metadata = plane.event_metadata
        for line in plane.lines:
            data_thread = line.name.startswith("tf_data")
            if line.name == "python":
                continue
            for event in line.events:
                name = metadata[event.metadata_id].name
                # Op kernel events are "<op name>:<op type>"; executor and thread-pool events
                # wrap them (their time would count twice).
                # ThunkExecutor::Execute runs inside CpuExecutable::ExecuteAsyncOnStream (XLA).
                if ":" not in name or name.startswith(("Iterator::", "ExecutorState",
                                                       "ThunkExecutor::")):
                    continue
                op_name, op_type = name.rsplit(":", 1)
                if not op_type or " " in op_type:
                    continue
                seconds = event.duration_ps * 1e-12
                by_type[op_type] += seconds
                by_part["input pipeline" if data_thread else part_of(op_name)] += seconds
                by_name[name] += seconds
                total += seconds
    return by_type, by_part, by_name, total


def main() -> None:
    parser = common.arg_parser(__doc__, batch=16)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--xla", action="store_true")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--top", type=int, default=20)
    parser.add_argument("--names", type=int, default=0, help="also list the N costliest ops")
    parser.add_argument("--hparams", default="{}", help="pre-training hparams")
    parser.add_argument("--finetune", action="store_true",
                        help="the fine-tuning step (sequence classification, "
                             "finetune_throughput.py's) instead of pre-training")
    args = parser.parse_args()
    common.set_threads(args.threads)
    import tensorflow as tf
    from util.hparams import parse_hparams_arg

    common.print_machine()
    work = tempfile.mkdtemp(prefix="profile_step_")
    if args.finetune:
        import finetune_throughput as ft
        ours = ft.Ours(work, args.size, args.batch, args.seq_len, args.dtype, args.xla, warmup=2)
        no_limits = {"float32": 0.0, "bfloat16": 0.0}

        def run_steps():
            ours.time_steps(args.steps, common.load_average(), no_limits)
    else:
        files = [pt.write_synthetic_tfrecords(work, args.seq_len)]
        ours = pt.Ours(args.dtype, work, files, pt.config_hparams(
            args.size, args.batch, args.seq_len, args.dtype, args.xla,
            **parse_hparams_arg(args.hparams)), warmup=2)

        def run_steps():
            ours.time_steps(args.steps, common.load_average())
    logdir = os.path.join(work, "trace")
    tf.profiler.experimental.start(logdir)
    start = time.perf_counter()
    run_steps()
    wall = (time.perf_counter() - start) / args.steps
    tf.profiler.experimental.stop()
    by_type, by_part, by_name, total = summarise_trace(logdir)
    shutil.rmtree(work, ignore_errors=True)
    print(f"\nwall {wall * 1e3:.0f} ms/step (profiling on), op kernel time "
          f"{total / args.steps * 1e3:.0f} CPU-ms/step, load {common.load_average():.2f}")
    print("\n| op type | CPU-ms/step | share |\n|---|---|---|")
    for op, seconds in by_type.most_common(args.top):
        print(f"| {op} | {seconds / args.steps * 1e3:.1f} | {seconds / total:.1%} |")
    if args.names:
        print("\n| op (name:type) | CPU-ms/step | share |\n|---|---|---|")
        for name, seconds in by_name.most_common(args.names):
            print(f"| {name} | {seconds / args.steps * 1e3:.1f} | {seconds / total:.1%} |")
    print("\n| phase | CPU-ms/step | share |\n|---|---|---|")
    for part, seconds in by_part.most_common():
        print(f"| {part} | {seconds / args.steps * 1e3:.1f} | {seconds / total:.1%} |")


if __name__ == "__main__":
    main()
