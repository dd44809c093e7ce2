"""Single-example inference latency of a fine-tuned ELECTRA classifier (encoder + SST-2 head).

The model is finetune/finetuning_model.py's FinetuningModel (random weights; latency does not
depend on them) called with training=False inside one tf.function per configuration, one example
(batch 1) per call, as a server answering one request at a time would. Reports median and 90th
percentile wall time per example after warm-up, in float32 and bfloat16, XLA off and on.

  python benchmarks/inference_latency.py                     # Small, seq 128, fp32/bf16, XLA off/on
  python benchmarks/inference_latency.py --seq-len 512 --xla off
"""
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import finetune_throughput as ft  # noqa: E402


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def main() -> None:
    parser = common.arg_parser(__doc__, batch=None)
    parser.add_argument("--batch", type=int, default=1)
    common.add_round_args(parser, steps=50, warmup=5, xla="both", unit="calls", peer=False,
                          warmup_help=None)
    args = parser.parse_args()

    common.set_threads(args.threads)
    import numpy as np
    import tensorflow as tf
    from finetune import finetuning_model, task_builder
    machine = common.print_machine()
    work = tempfile.mkdtemp(prefix="inference_latency_")
    rng = np.random.RandomState(0)
    ids = rng.randint(common.FIRST_WORD_ID, 30522, (args.batch, args.seq_len)).astype(np.int32)
    ids[:, 0], ids[:, -1] = common.CLS_ID, common.SEP_ID
    features = {"input_ids": tf.constant(ids),
                "input_mask": tf.ones_like(ids), "segment_ids": tf.zeros_like(ids),
                "task_id": tf.zeros([args.batch], tf.int32),
                "sst_eid": tf.zeros([args.batch], tf.int32),
                "sst_label_ids": tf.zeros([args.batch], tf.int32)}

    configs = []
    dtypes, xlas = common.dtypes_and_xlas(args)
    for xla in xlas:
        for dtype in dtypes:
            config = ft.finetune_config(work, args.size, args.batch, args.seq_len, dtype, xla)
            config.do_train = False
            model = finetuning_model.FinetuningModel(config, task_builder.get_tasks(config))

            def predict(batch, model=model):
                _, outputs = model(batch, training=False)
                return outputs["sst"]["logits"]

            fn = tf.function(predict, jit_compile=xla)
            start = time.perf_counter()
            fn(features).numpy()
            first = time.perf_counter() - start
            for _ in range(args.warmup):
                fn(features).numpy()
            configs.append({"dtype": dtype, "xla": xla, "fn": fn, "first_call_s": first,
                            "times": [], "loads": [], "bert_config": model.bert_config})
            print(f"# built {dtype}{' xla' if xla else ''}: first call {first:.1f} s", flush=True)

    for r in range(args.rounds):
        for c in configs:
            c["loads"].append(common.wait_for_idle(
                args.idle_load, args.max_wait, f"(round {r + 1}: {c['dtype']} xla={c['xla']})"))
            fn = c["fn"]
            for _ in range(args.calls):
                start = time.perf_counter()
                fn(features).numpy()
                c["times"].append(time.perf_counter() - start)

    rows = []
    for c in configs:
        flops = common.inference_flops(c["bert_config"], args.seq_len, 2)
        med = statistics.median(c["times"])
        row = {"benchmark": "electra_inference_latency", "size": args.size, "dtype": c["dtype"],
               "xla": c["xla"], "batch": args.batch, "seq_len": args.seq_len,
               "threads": args.threads, "calls_timed": len(c["times"]),
               "latency_ms_median": round(med * 1e3, 2),
               "latency_ms_p90": round(percentile(c["times"], 0.9) * 1e3, 2),
               "latency_ms_min": round(min(c["times"]) * 1e3, 2),
               "sequences_per_sec": round(args.batch / med, 2),
               "tokens_per_sec": round(args.batch * args.seq_len / med, 1),
               "forward_flops_per_example": int(flops["appendix_e"]),
               "executed_flops_per_example": int(flops["executed"]),
               "achieved_gflops_executed": round(flops["executed"] * args.batch / med / 1e9, 2),
               "first_call_s": round(c["first_call_s"], 1), "load_before": c["loads"]}
        rows.append(row)
        common.emit(row)
    print()
    print(f"ELECTRA-{args.size} classifier, {args.batch} example(s) of {args.seq_len} tokens per "
          f"call, {args.threads} threads")
    print(common.markdown_table(rows, [
        ("dtype", "dtype"), ("xla", "xla"), ("latency_ms_median", "median ms"),
        ("latency_ms_p90", "p90 ms"), ("latency_ms_min", "min ms"),
        ("achieved_gflops_executed", "GFLOP/s (executed)"), ("first_call_s", "first call s"),
        ("load_before", "load")]))
    common.print_machine_end(machine)


if __name__ == "__main__":
    main()
