"""The fine-tuning step on real sentence lengths: padding removed or kept, graph rewrites on or off.

Each variant runs in a fresh process (so its first step pays what a user's first step pays:
tracing, graph optimisation, the first compiles), rounds alternate the variants, and each
process reports its first step and the median of its later steps. Batches: 32 rows whose lengths
are drawn from the first `--rows` training rows of a shared task (SST-2 sentences or CoNLL-2000
chunking sentences, tokenized with the shared WordPiece vocabulary), each batch padded to its
longest row rounded up to 16 (the default length buckets), random token ids, ELECTRA-Small from
random weights, the real step (finetune/trainer.py ModelRunner's engine: forward, backward,
clipping, AdamW with layer-wise learning rates).

  python benchmarks/finetune_step_ab.py                          # SST-2 lengths, bfloat16
  python benchmarks/finetune_step_ab.py --task chunk --dtype float32 --rounds 3
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import finetune_throughput as ft  # noqa: E402

SOURCES = {"sst": os.path.join(common.SHARED, "data", "glue", "SST-2", "train.tsv"),
           "chunk": os.path.join(common.SHARED, "data", "chunk", "train.txt")}
# Grappler's passes but its oneDNN fusions (MatMul + BiasAdd + activation) switched off.
REMAP_ONLY = {name: False for name in (
    "layout_optimizer", "constant_folding", "shape_optimization", "arithmetic_optimization",
    "dependency_optimization", "loop_optimization", "function_optimization", "debug_stripper",
    "scoped_allocator_optimization", "pin_to_host_optimization", "implementation_selector",
    "auto_mixed_precision")}
# name -> (hparams, tf.config.optimizer options: None = TensorFlow's defaults)
VARIANTS = {
    "padded": ({"remove_padding": False}, None),
    "packed": ({"remove_padding": True}, None),
    "packed_no_rewrites": ({"remove_padding": True}, {"disable_meta_optimizer": True}),
    "packed_remap_only": ({"remove_padding": True}, REMAP_ONLY),
}


def sentence_lengths(task: str, rows: int, max_len: int) -> list[int]:
    """WordPiece lengths with [CLS] and [SEP] of the first `rows` training sentences."""
    from model import tokenization
    tokenizer = tokenization.FullTokenizer(ft.VOCAB_FILE, do_lower_case=True)
    with open(SOURCES[task], encoding="utf-8") as f:
        if task == "sst":
            sentences = [line.split("\t")[0] for line in f.read().splitlines()[1:rows + 1]]
        else:
            blocks = [b for b in f.read().split("\n\n") if b.strip()][:rows]
            sentences = [" ".join(line.split()[0] for line in b.splitlines()) for b in blocks]
    return [min(max_len, len(tokenizer.tokenize(s)) + 2) for s in sentences]


def child(args) -> None:
    """One variant in this process: prints one JSON line."""
    import numpy as np
    import tensorflow as tf
    from finetune import task_builder
    from finetune.trainer import ModelRunner

    hparams, options = VARIANTS[args.variant]
    if options:
        tf.config.optimizer.set_experimental_options(options)
    lengths = np.array(sentence_lengths(args.task, args.rows, args.max_len))
    rng = np.random.default_rng(0)
    batches = []
    for _ in range(args.batches):
        real = lengths[rng.integers(0, len(lengths), args.batch)]
        width = min(args.max_len, int(-(-real.max() // 16) * 16))
        mask = (np.arange(width)[None] < real[:, None]).astype(np.int32)
        batches.append({"input_ids": rng.integers(1000, 30000, mask.shape).astype(np.int32) * mask,
                        "input_mask": mask, "segment_ids": 0 * mask,
                        "task_id": np.zeros(args.batch, np.int32),
                        "sst_eid": np.arange(args.batch, dtype=np.int32),
                        "sst_label_ids": rng.integers(0, 2, args.batch).astype(np.int32)})
    spec = {k: tf.TensorSpec([args.batch, None] if v.ndim == 2 else [args.batch], tf.int32)
            for k, v in batches[0].items()}
    dataset = tf.data.Dataset.from_generator(lambda: iter(batches), output_signature=spec)
    iterator = iter(dataset.repeat())
    config = ft.finetune_config(tempfile.mkdtemp(prefix="finetune_step_ab_"), "small",
                                args.batch, args.max_len, args.dtype, False, **hparams)
    runner = ModelRunner(config, task_builder.get_tasks(config), ft.StubPreprocessor(args.batch),
                         trial=1)
    start = time.perf_counter()
    runner.engine.run(iterator, 1)
    first = time.perf_counter() - start
    start = time.perf_counter()
    for _ in range(args.batches - 1):  # every batch's shapes seen (their compiles paid)
        runner.engine.run(iterator, 1)
    warm = time.perf_counter() - start
    times = []
    for _ in range(args.steps):
        start = time.perf_counter()
        runner.engine.run(iterator, 1)
        times.append(time.perf_counter() - start)
    print(json.dumps({"variant": args.variant, "first_step_s": round(first, 2),
                      "warm_up_s": round(warm, 1), "step_ms_median": round(
                          statistics.median(times) * 1e3, 1),
                      "mean_padded_len": float(np.mean([b["input_mask"].shape[1]
                                                        for b in batches])),
                      "mean_real_tokens": float(np.mean([b["input_mask"].sum(1).mean()
                                                         for b in batches]))}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", choices=sorted(SOURCES), default="sst")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--rows", type=int, default=8000)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--batches", type=int, default=30, help="distinct batches, cycled")
    parser.add_argument("--steps", type=int, default=30, help="timed steps per process")
    parser.add_argument("--max-len", type=int, default=128)
    parser.add_argument("--variant", help=argparse.SUPPRESS)  # the child's
    args = parser.parse_args()
    if args.variant:
        child(args)
        return
    machine = common.print_machine()
    rows = []
    for r in range(args.rounds):
        for variant in args.variants.split(","):
            load = common.load_average()
            out = subprocess.run(
                [sys.executable, __file__, "--variant", variant] + sys.argv[1:],
                capture_output=True, text=True, check=True,
                env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")).stdout.strip().splitlines()[-1]
            row = dict(json.loads(out), round=r + 1, task=args.task, dtype=args.dtype,
                       load_before=load)
            print(json.dumps(row), flush=True)
            rows.append(row)
    print(f"\nELECTRA-Small fine-tuning step on {args.task} lengths (first {args.rows} rows), "
          f"batch {args.batch}, {args.dtype}; medians over {args.rounds} processes per variant")
    print("| variant | first step s | later step ms | mean padded len | real tokens per row |")
    print("|---|---|---|---|---|")
    for variant in args.variants.split(","):
        mine = [row for row in rows if row["variant"] == variant]
        print(f"| {variant} | {statistics.median(r['first_step_s'] for r in mine):.1f} | "
              f"{statistics.median(r['step_ms_median'] for r in mine):.0f} | "
              f"{mine[0]['mean_padded_len']:.1f} | {mine[0]['mean_real_tokens']:.1f} |")
    common.print_machine_end(machine)


if __name__ == "__main__":
    main()
