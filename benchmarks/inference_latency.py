"""Single-example inference latency of a fine-tuned ELECTRA classifier (encoder + SST-2 head).

The model is finetune/finetuning_model.py's FinetuningModel (random weights; latency does not
depend on them) called with training=False inside one tf.function per configuration, one example
(batch 1) per call, as a server answering one request at a time would. Reports median and 90th
percentile wall time per example after warm-up, in float32 and bfloat16, XLA off and on.

Beside it, in alternating rounds (unless --no-peer), the Hugging Face PyTorch peer's latency:
benchmarks/peer_inference_latency.py run with the peer's python, ElectraForSequenceClassification
of the same size, eval mode, torch.inference_mode(), in every configuration of --peer-configs
(fp32 = float32 eager, bf16 = bfloat16 autocast; default both). Our rows get `x peer fp32
latency` and `x peer bf16 latency` (the peer's median latency / ours: > 1 means we are faster).

  python benchmarks/inference_latency.py                     # Small, seq 128, fp32/bf16, XLA off/on
  python benchmarks/inference_latency.py --rounds 3 --peer-configs fp32,bf16
  python benchmarks/inference_latency.py --seq-len 512 --xla off --no-peer
"""
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import finetune_throughput as ft  # noqa: E402

# run with the peer's python (common.run_peer); never imported
PEER_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "peer_inference_latency.py")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def main() -> None:
    parser = common.arg_parser(__doc__, batch=None)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--plain-blocks", action="store_true",
                        help="also time XLA-off forwards with the elementwise blocks as plain "
                             "graph ops (model/layers.py FUSE_ELEMENTWISE false)")
    common.add_round_args(parser, steps=50, warmup=5, xla="both", unit="calls",
                          warmup_help="untimed calls after the first")
    args = parser.parse_args()

    common.set_threads(args.threads)
    machine = common.print_machine()
    work = tempfile.mkdtemp(prefix="inference_latency_")
    features = _features(args)
    configs = _build_forwards(args, work, features)
    use_peer = common.use_peer(args.no_peer) and args.size != "base"
    peer_runs = []
    for r in range(args.rounds):
        _time_round(args, configs, features, r)
        if use_peer:
            peer_runs += peer_latency_round(args, r)

    flops = common.inference_flops(configs[0]["bert_config"], args.seq_len, 2)
    rows = _our_rows(args, configs, flops, peer_runs)
    # the peer's head has one more H x H dense layer (on [CLS]) than the official one
    hidden = configs[0]["bert_config"].hidden_size
    rows += _peer_rows(args, peer_runs, flops["executed"] + 2 * hidden * hidden)
    _print_table(args, rows)
    common.print_machine_end(machine)


def _features(args) -> dict:
    """One batch of random word ids between [CLS] and [SEP], for the sst classifier."""
    import numpy as np
    import tensorflow as tf

    rng = np.random.RandomState(0)
    ids = rng.randint(common.FIRST_WORD_ID, 30522, (args.batch, args.seq_len)).astype(np.int32)
    ids[:, 0], ids[:, -1] = common.CLS_ID, common.SEP_ID
    return {"input_ids": tf.constant(ids),
            "input_mask": tf.ones_like(ids), "segment_ids": tf.zeros_like(ids),
            "task_id": tf.zeros([args.batch], tf.int32),
            "sst_eid": tf.zeros([args.batch], tf.int32),
            "sst_label_ids": tf.zeros([args.batch], tf.int32)}


def _build_forwards(args, work: str, features: dict) -> list[dict]:
    """A traced (or compiled) forward per dtype, XLA and block setting, called once and warmed."""
    import tensorflow as tf
    from finetune import finetuning_model, task_builder
    from model import layers

    configs = []
    dtypes, xlas = common.dtypes_and_xlas(args)
    settings = [(xla, dtype, True) for xla in xlas for dtype in dtypes]
    if args.plain_blocks:
        settings += [(False, dtype, False) for dtype in dtypes]
    for xla, dtype, fused in settings:
        config = ft.finetune_config(work, args.size, args.batch, args.seq_len, dtype, xla)
        config.do_train = False
        model = finetuning_model.FinetuningModel(config, task_builder.get_tasks(config))

        def predict(batch, model=model):
            _, outputs = model(batch, training=False)
            return outputs["sst"]["logits"]

        fn = tf.function(predict, jit_compile=xla)
        layers.FUSE_ELEMENTWISE = fused  # read while the first call traces
        start = time.perf_counter()
        fn(features).numpy()
        first = time.perf_counter() - start
        layers.FUSE_ELEMENTWISE = True
        for _ in range(args.warmup):
            fn(features).numpy()
        configs.append({"dtype": dtype, "xla": xla, "blocks": "fused" if fused else "plain",
                        "fn": fn, "first_call_s": first,
                        "times": [], "round_times": [], "loads": [],
                        "bert_config": model.bert_config})
        print(f"# built {dtype}{' xla' if xla else ''} ({configs[-1]['blocks']} blocks): "
              f"first call {first:.1f} s", flush=True)
    return configs


def _time_round(args, configs: list[dict], features: dict, r: int) -> None:
    """Round `r` (0-based): --calls timed calls of each forward, after waiting for idle."""
    for c in configs:
        c["loads"].append(common.wait_for_idle(
            args.idle_load, args.max_wait, f"(round {r + 1}: {c['dtype']} xla={c['xla']})"))
        fn = c["fn"]
        c["round_times"].append([])
        for _ in range(args.calls):
            start = time.perf_counter()
            fn(features).numpy()
            c["round_times"][-1].append(time.perf_counter() - start)
        c["times"] += c["round_times"][-1]


def _our_rows(args, configs: list[dict], flops: dict, peer_runs: list[dict]) -> list[dict]:
    rows = []
    for c in configs:
        med = statistics.median(c["times"])
        row = {"benchmark": "electra_inference_latency", "impl": "ours-tf", "size": args.size,
               "dtype": c["dtype"], "xla": c["xla"], "blocks": c["blocks"],
               "batch": args.batch,
               "seq_len": args.seq_len, "threads": args.threads, "calls_timed": len(c["times"]),
               "latency_ms_median": round(med * 1e3, 2),
               "latency_ms_p90": round(percentile(c["times"], 0.9) * 1e3, 2),
               "latency_ms_min": round(min(c["times"]) * 1e3, 2),
               "sequences_per_sec": round(args.batch / med, 2),
               "tokens_per_sec": round(args.batch * args.seq_len / med, 1),
               "forward_flops_per_example": int(flops["appendix_e"]),
               "executed_flops_per_example": int(flops["executed"]),
               "achieved_gflops_executed": round(flops["executed"] * args.batch / med / 1e9, 2),
               "first_call_s": round(c["first_call_s"], 1), "load_before": c["loads"]}
        row.update(common.peer_ratios(
            med * 1e3, [statistics.median(t) * 1e3 for t in c["round_times"]], peer_runs,
            "latency_ms_median", higher_is_faster=False, suffix="_latency"))
        rows.append(row)
        common.emit(row)
    return rows


def _peer_rows(args, peer_runs: list[dict], peer_flops: int) -> list[dict]:
    rows = []
    for run in peer_runs:
        med = run["latency_ms_median"] / 1e3
        row = {"benchmark": "electra_inference_latency", "impl": "peer-hf-pytorch",
               "size": args.size, "dtype": common.PEER_CONFIGS[run["peer_config"]][0],
               "peer_config": run["peer_config"], "round": run["round"], "xla": False,
               "batch": args.batch, "seq_len": args.seq_len, "threads": run["threads"],
               "calls_timed": run["calls_timed"],
               **{k: run[k] for k in ("latency_ms_median", "latency_ms_p90", "latency_ms_min")},
               "sequences_per_sec": round(args.batch / med, 2),
               "tokens_per_sec": round(args.batch * args.seq_len / med, 1),
               "executed_flops_per_example": peer_flops,
               "achieved_gflops_executed": round(peer_flops * args.batch / med / 1e9, 2),
               "first_call_s": run["first_call_s"], "load_before": [run["load_before"]],
               "torch": run["torch"], "transformers": run["transformers"]}
        rows.append(row)
        common.emit(row)
    return rows


def _print_table(args, rows: list[dict]) -> None:
    print()
    print(f"ELECTRA-{args.size} classifier, {args.batch} example(s) of {args.seq_len} tokens per "
          f"call, {args.threads} threads; x peer latency = the peer's median latency (over "
          f"rounds) / ours: > 1 means we are faster; per round against the same round's peer run")
    print(common.markdown_table([common.display_fields(row, "_latency") for row in rows], [
        ("impl", "impl"), ("dtype", "dtype"), ("xla", "xla"), ("blocks", "blocks"),
        ("round", "round"),
        ("latency_ms_median", "median ms"), ("latency_ms_p90", "p90 ms"),
        ("latency_ms_min", "min ms"),
        *common.comparison_columns(rows, "_latency", " latency"),
        ("achieved_gflops_executed", "GFLOP/s (executed)"), ("first_call_s", "first call s"),
        ("load_before", "load")]))


def peer_latency_round(args, round_index: int) -> list[dict]:
    """Round `round_index` (0-based) of the peer: one run of peer_inference_latency.py (every
    --peer-configs entry, in order) after waiting for an idle machine; one dict per config with
    its latencies, `peer_config`, `round` (1-based), `load_before`, threads and versions."""
    load = common.wait_for_idle(args.idle_load, args.max_wait,
                                f"(round {round_index + 1}: peer)")
    peer = common.run_peer(PEER_SCRIPT, [
        "--size", args.size, "--batch", args.batch, "--seq-len", args.seq_len,
        "--calls", args.calls, "--warmup", args.warmup, "--threads", args.threads,
        "--configs", ",".join(args.peer_configs)])
    runs = []
    for config in args.peer_configs:
        runs.append(dict(peer["configs"][config], peer_config=config, round=round_index + 1,
                         load_before=load, threads=peer["threads"], torch=peer["torch"],
                         transformers=peer["transformers"]))
        print(f"# round {round_index + 1} peer {config}: median "
              f"{runs[-1]['latency_ms_median']:.1f} ms", flush=True)
    return runs


if __name__ == "__main__":
    main()
