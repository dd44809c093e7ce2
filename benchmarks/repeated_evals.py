"""The same pre-training held-out eval run again and again, each timed: what a periodic eval
costs once traced, with the code of this checkout or of `--code-root` (another checkout, e.g.
the code before a change).

Each eval reads `--eval-steps` held-out batches of `--eval-batch` through a fresh iterator, as
`pretrain/trainer.Trainer.evaluate` does, and ends by deleting it. With tf.data's autotuning on
(TensorFlow's default) that deletion waits for the tuning thread's next wake-up, so some evals
take seconds longer than others of the same work; util/tf_data.py turns autotuning off.

  python benchmarks/repeated_evals.py                           # Small, float32, 6 x 6 batches of 32
  python benchmarks/repeated_evals.py --code-root OLD_CHECKOUT  # the same with other code
"""
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def main() -> None:
    import common  # (sets sys.path and the TF log level)
    parser = common.arg_parser(__doc__, batch=16)
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--eval-steps", type=int, default=6, help="held-out batches per eval")
    parser.add_argument("--eval-batch", type=int, default=32)
    parser.add_argument("--evals", type=int, default=6, help="evals timed after the first")
    parser.add_argument("--code-root", default=None,
                        help="the checkout whose code is measured (default: this one)")
    args = parser.parse_args()
    if args.code_root:  # ahead of this checkout, which common put first
        sys.path.insert(0, os.path.abspath(args.code_root))
    from pretrain import trainer as trainer_lib
    from pretrain_throughput import build_trainer, config_hparams, write_synthetic_tfrecords
    if args.code_root:
        assert trainer_lib.__file__.startswith(os.path.abspath(args.code_root))
    machine = common.print_machine()
    with tempfile.TemporaryDirectory() as work:
        path = write_synthetic_tfrecords(work, args.seq_len, count=2 * args.eval_batch)
        hparams = config_hparams(args.size, args.batch, args.seq_len, args.dtype, False,
                                 eval_batch_size=args.eval_batch, num_eval_steps=args.eval_steps,
                                 pretrain_tfrecords=path, eval_tfrecords=path)
        trainer = build_trainer(work, hparams)
        start = time.perf_counter()
        trainer.evaluate([path], args.eval_steps)  # traces the eval step
        first = time.perf_counter() - start
        times = []
        for _ in range(args.evals):
            start = time.perf_counter()
            trainer.evaluate([path], args.eval_steps)
            times.append(round(time.perf_counter() - start, 2))
    row = {"benchmark": "repeated_evals", "code": trainer_lib.__file__, "size": args.size,
           "dtype": args.dtype, "eval_steps": args.eval_steps, "eval_batch": args.eval_batch,
           "first_eval_s": round(first, 2), "eval_s": times,
           "median_s": statistics.median(times), "min_s": min(times), "max_s": max(times),
           "load_after": round(common.load_average(), 2)}
    common.emit(row)
    print(f"evals after the first, s: {', '.join(str(t) for t in times)} (median "
          f"{row['median_s']}, min {row['min_s']}, max {row['max_s']}; code {row['code']})")
    common.print_machine_end(machine)


if __name__ == "__main__":
    main()
