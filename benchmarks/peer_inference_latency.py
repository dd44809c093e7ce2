#!/usr/bin/env python3
"""The Hugging Face PyTorch peer's single-example inference latency (run with the PEER's python).

ElectraForSequenceClassification at the size of ours (the peer's SIZES, from
../shared/peers/hf_pretrain_bench.py), random weights, eval mode, under torch.inference_mode(), one
example per call (batch 1 by default: [CLS] ... [SEP], all tokens attended), the logits brought
to a numpy array as ours are. Configurations: fp32 = float32 eager, bf16 = the same under
torch.autocast("cpu", bfloat16). Each: --warmup untimed calls, then --calls timed ones. Prints one
JSON line: per configuration the latency median / p90 / min in ms, and torch, transformers, threads.

This file is a measuring instrument like ../shared/peers: it imports torch and transformers and
nothing from the project, and the project never imports it; benchmarks/inference_latency.py runs
it with the peer's python in alternating rounds with ours.

  ../peer-venv/bin/python benchmarks/peer_inference_latency.py --size small --calls 50
  ../peer-venv/bin/python benchmarks/peer_inference_latency.py --size tiny --calls 5 --configs bf16
"""
import argparse
import json
import os
import statistics
import sys
import time

os.environ.setdefault("USE_TF", "0")  # stop transformers importing TensorFlow if it is installed
import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import ElectraConfig, ElectraForSequenceClassification  # noqa: E402

DEFAULT_PEER_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "shared", "peers")
CONFIGS = ("fp32", "bf16")


def percentile(values, q):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def build_model(d, vocab, num_labels):
    """The classifier hf_finetune_bench.py trains, of the peer's dimensions `d`, in eval mode."""
    cfg = ElectraConfig(vocab_size=vocab, embedding_size=d["emb"], hidden_size=d["hidden"],
                        num_hidden_layers=d["layers"], num_attention_heads=d["heads"],
                        intermediate_size=d["ffn"], max_position_embeddings=512,
                        type_vocab_size=2, hidden_dropout_prob=0.1,
                        attention_probs_dropout_prob=0.1, layer_norm_eps=1e-12,
                        num_labels=num_labels)
    return ElectraForSequenceClassification(cfg).eval()


def time_config(model, inputs, bf16, warmup, calls):
    """Latencies (s) of `calls` single calls after `warmup` untimed ones, and the first call's."""
    def call():
        with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            return model(**inputs).logits.float().numpy()

    start = time.perf_counter()
    call()
    first = time.perf_counter() - start
    for _ in range(warmup):
        call()
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return times, first


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", default="small", help="a key of the peer's SIZES (small, tiny)")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--calls", type=int, default=50, help="timed calls per configuration")
    ap.add_argument("--warmup", type=int, default=5, help="untimed calls after the first")
    ap.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0 = default)")
    ap.add_argument("--configs", default=",".join(CONFIGS), help="of: " + ", ".join(CONFIGS))
    ap.add_argument("--num-labels", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=30522)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--peer-dir", default=DEFAULT_PEER_DIR,
                    help="where hf_pretrain_bench.py (SIZES, make_batch) is")
    args = ap.parse_args()
    configs = [c.strip() for c in args.configs.split(",") if c.strip()]
    if not configs or any(c not in CONFIGS for c in configs):
        ap.error(f"--configs {args.configs!r}: choose from {', '.join(CONFIGS)}")

    sys.path.insert(0, args.peer_dir)
    from hf_pretrain_bench import SIZES, make_batch  # the peer's file  # noqa: E402
    if args.size not in SIZES:
        ap.error(f"--size {args.size}: the peer has {', '.join(sorted(SIZES))}")
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    model = build_model(SIZES[args.size], args.vocab, args.num_labels)
    ids = make_batch(torch.Generator().manual_seed(args.seed), args.batch, args.seq_len,
                     args.vocab)
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids),
              "token_type_ids": torch.zeros_like(ids)}

    results = {}
    for config in configs:
        times, first = time_config(model, inputs, config == "bf16", args.warmup, args.calls)
        results[config] = {
            "dtype": "bfloat16-autocast" if config == "bf16" else "float32",
            "calls_timed": len(times),
            "latency_ms_median": round(statistics.median(times) * 1e3, 3),
            "latency_ms_p90": round(percentile(times, 0.9) * 1e3, 3),
            "latency_ms_min": round(min(times) * 1e3, 3),
            "first_call_s": round(first, 2)}
        print(f"{config}: median {results[config]['latency_ms_median']:.1f} ms",
              file=sys.stderr, flush=True)
    print(json.dumps({
        "peer": "hf-transformers-pytorch", "benchmark": "electra_inference_latency",
        "size": args.size, "batch": args.batch, "seq_len": args.seq_len,
        "num_labels": args.num_labels, "warmup": args.warmup, "configs": results,
        "threads": torch.get_num_threads(), "interop_threads": torch.get_num_interop_threads(),
        "torch": torch.__version__, "transformers": transformers.__version__,
        "python": sys.version.split()[0], "cpu_count": os.cpu_count()}))


if __name__ == "__main__":
    main()
