"""Pre-training's own overheads: time to the first step, and one periodic eval against 20 steps.

What a run pays besides its steps, measured in one process the way run_pretraining.py spends it:
process start (from the kernel's process table) to the end of the first training step, split
into imports, config + trainer (model, optimizer) build, input pipeline, and the first step (its
tracing); then `--steps` training steps in one host loop; then `--evals` periodic evaluations as
pretrain/loop.py runs them (pretrain/evaluation.run_eval: `--eval-steps` held-out batches of
eval_batch_size, the health checks' geometry batch, the results files), each timed, with the
eval step's trace count after each (1 = traced once for the run). Data: synthetic tfrecords (the
peer's kind of batch, benchmarks/pretrain_throughput.py), a training shard and a held-out one.

  python benchmarks/pretrain_overheads.py                       # Small, b16 s128, eval b128
  python benchmarks/pretrain_overheads.py --size tiny --eval-batch 16   # a quick check

Prints one JSON line and a table. On a loaded machine every figure is pessimistic; the ratio of
one eval to `--steps` steps is the figure to compare.
"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def process_start_time() -> float:
    """This process's start as a Unix time (Linux /proc), else now."""
    try:
        with open("/proc/self/stat", encoding="utf-8") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/stat", encoding="utf-8") as f:
            boot = next(int(line.split()[1]) for line in f if line.startswith("btime"))
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return time.time()


STARTED = process_start_time()
BEFORE_IMPORTS = time.time()
import common  # noqa: E402  (sets sys.path and the TF log level)
from util import console  # noqa: E402,F401  (TensorFlow's import, as the command does it)
import tensorflow as tf  # noqa: E402,F401
from pretrain import evaluation  # noqa: E402
from util import training_utils  # noqa: E402
from pretrain_throughput import build_trainer, config_hparams, write_synthetic_tfrecords  # noqa: E402
AFTER_IMPORTS = time.time()


def main() -> None:
    args = _parse_args()
    _set_graph_modes(args)
    import shutil
    import tempfile
    work = args.work or tempfile.mkdtemp(prefix="pretrain_overheads_")
    machine = common.machine_summary()
    load_before = round(common.load_average(), 2)
    try:
        row = _measure(args, work)
        row.update(graph_options=args.graph_options, graph_rewrites=args.graph_rewrites,
                   load_before=load_before, load_after=round(common.load_average(), 2),
                   machine=machine)
        common.emit(row)
        _print_row(args, row)
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)


def _parse_args():
    parser = common.arg_parser(__doc__, batch=16)
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--steps", type=int, default=20, help="training steps timed in one loop")
    parser.add_argument("--eval-steps", type=int, default=20, help="held-out batches per eval")
    parser.add_argument("--eval-batch", type=int, default=128,
                        help="eval_batch_size (the hparam's default: 128)")
    parser.add_argument("--evals", type=int, default=3, help="periodic evals timed in a row")
    parser.add_argument("--work", default=None, help="work directory (default: a temp dir)")
    parser.add_argument("--graph-rewrites", action="store_true",
                        help="run the graphs with Grappler's rewrites (run_pretraining.py runs "
                             "them without)")
    parser.add_argument("--constant-folding", action="store_true",
                        help="instantiate functions with constant folding (run_pretraining.py "
                             "turns it off)")
    parser.add_argument("--graph-options", default=None, metavar="JSON",
                        help="Grappler options for tf.config.optimizer.set_experimental_options, "
                             "e.g. '{\"constant_folding\": false}' (which rewrites pay)")
    return parser.parse_args()


def _set_graph_modes(args) -> None:
    """The collector and graph settings run_pretraining.py uses, or the flags' others."""
    training_utils.collect_garbage_rarely()  # as run_pretraining.py sets its collector
    if args.constant_folding:  # Grappler off only, folding left on
        tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": True})
    elif not args.graph_rewrites:
        training_utils.run_graphs_as_traced()  # as run_pretraining.py runs its graphs
    if args.graph_options:
        tf.config.optimizer.set_experimental_options(json.loads(args.graph_options))


def _measure(args, work: str) -> dict:
    """The start-up, training and eval times of one tiny run in `work`."""
    train_dir, eval_dir = os.path.join(work, "train"), os.path.join(work, "eval")
    os.makedirs(train_dir, exist_ok=True)
    os.makedirs(eval_dir, exist_ok=True)
    data_start = time.time()
    train_file = write_synthetic_tfrecords(train_dir, args.seq_len, count=8 * args.batch)
    eval_file = write_synthetic_tfrecords(eval_dir, args.seq_len, count=2 * args.eval_batch,
                                          seed=1)
    data_s = time.time() - data_start  # the data a real run reads exists already: not counted

    t = time.time()
    hparams = config_hparams(args.size, args.batch, args.seq_len, args.dtype, False,
                             eval_batch_size=args.eval_batch,
                             num_eval_steps=args.eval_steps,
                             eval_every_steps=args.steps,
                             pretrain_tfrecords=train_file, eval_tfrecords=eval_file)
    trainer = build_trainer(work, hparams)
    build_s = time.time() - t
    t = time.time()
    iterator = trainer.train_iterator([train_file])
    pipeline_s = time.time() - t
    t = time.time()
    trainer.train_steps(iterator, 1)
    first_step_s = time.time() - t
    to_first_step_s = time.time() - STARTED - data_s

    trainer.train_steps(iterator, 2)  # warm-up, untimed
    t = time.time()
    result = trainer.train_steps(iterator, args.steps)
    float(result.metrics["loss"])
    steps_s = time.time() - t
    row = {"benchmark": "pretrain_overheads", "size": args.size, "dtype": args.dtype,
           "batch": args.batch, "seq_len": args.seq_len, "eval_batch": args.eval_batch,
           "eval_steps": args.eval_steps, "steps": args.steps,
           "imports_s": round(AFTER_IMPORTS - STARTED, 2),
           "python_start_s": round(BEFORE_IMPORTS - STARTED, 2),
           "build_s": round(build_s, 2), "input_pipeline_s": round(pipeline_s, 2),
           "first_step_s": round(first_step_s, 2),
           "to_first_step_s": round(to_first_step_s, 2),
           "steps_s": round(steps_s, 2),
           "step_ms": round(steps_s / args.steps * 1e3, 1)}
    row.update(_time_evals(args, trainer, eval_file, steps_s))
    return row


def _time_evals(args, trainer, eval_file: str, steps_s: float) -> dict:
    """--evals periodic evals in a row, then a later eval's parts alone."""
    config = trainer.config
    evals = []
    for _ in range(args.evals):
        t = time.time()
        evaluation.run_eval(config, trainer, [eval_file], chief=True)
        evals.append({"eval_s": round(time.time() - t, 2),
                      "eval_step_traces": trainer._eval_step_fn  # pylint: disable=protected-access
                      .experimental_get_tracing_count()})
    # The parts of a later eval: the held-out batches alone, the health geometry batch.
    t = time.time()
    trainer.evaluate([eval_file], config.num_eval_steps)
    batches_s = time.time() - t
    t = time.time()
    evaluation.geometry_metrics(config, trainer, [eval_file])
    geometry_s = time.time() - t
    later = [e["eval_s"] for e in evals[1:]] or [evals[0]["eval_s"]]
    return {"evals": evals, "first_eval_s": evals[0]["eval_s"],
            "later_eval_s": round(sum(later) / len(later), 2),
            "eval_batches_s": round(batches_s, 2), "geometry_s": round(geometry_s, 2),
            "later_eval_over_steps": round(sum(later) / len(later) / steps_s, 2)}


def _print_row(args, row: dict) -> None:
    print()
    print(f"ELECTRA-{args.size} pre-training, batch {args.batch}, seq {args.seq_len}, "
          f"{args.dtype}; eval = {args.eval_steps} held-out batches of {args.eval_batch} + "
          f"the health checks' batch + results files; load {row['load_before']} -> "
          f"{row['load_after']}")
    print(common.markdown_table([row], [
        ("imports_s", "imports s"), ("build_s", "config + trainer s"),
        ("input_pipeline_s", "input pipeline s"), ("first_step_s", "first step s"),
        ("to_first_step_s", "process start to first step s"),
        ("steps_s", f"{args.steps} steps s"), ("first_eval_s", "first eval s"),
        ("later_eval_s", "later eval s"), ("eval_batches_s", "of which batches s"),
        ("geometry_s", "health batch s"), ("later_eval_over_steps", "eval / steps")]))
    print("eval step traces after each eval: "
          + ", ".join(str(e["eval_step_traces"]) for e in row["evals"]))


if __name__ == "__main__":
    main()
