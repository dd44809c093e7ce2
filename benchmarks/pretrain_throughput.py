"""Pre-training step throughput of ELECTRA, side by side with the Hugging Face PyTorch peer.

Our step is the real one (pretrain/trainer.py: masking, generator on the masked positions,
Gumbel sampling, discriminator, loss, backward, clipping, AdamW) fed by the real input pipeline
(pretrain/input_pipeline.py) from synthetic tfrecords shaped like the peer's batches (ids drawn
from [999, vocab), [CLS] ... [SEP], no padding). Each configuration is timed one step per call
(`Trainer.train_steps(iterator, 1)`, host round trip included, as the peer times its steps) after
warm-up; rounds alternate ours and the peer's (same size, batch, sequence length and threads), so
the ratio ours/peer comes from the same machine state. Each round runs the peer in every
configuration of --peer-configs (fp32, bf16 = autocast, compile = torch.compile, bf16+compile;
default fp32,bf16), and each of our rows gets its ratio to each. The load average is printed
before each measurement, after waiting (up to --max-wait s) for it to fall below --idle-load.

Also measured in the same run: the matmul limits (2048-cube matmul, float32 and bfloat16, both
before every timed block, ours and the peer's; a row's fraction of limit uses its dtype's), the
input pipeline alone (batches/s against the fastest step), and with --curve-steps N a short
training run on real text in float32, bfloat16 and float32 with another seed (the noise floor).
FLOPs conventions: benchmarks/common.py.

  python benchmarks/pretrain_throughput.py                          # Small, b16 s128, fp32 + bf16
  python benchmarks/pretrain_throughput.py --rounds 3 --peer-configs fp32,bf16,compile,bf16+compile
  python benchmarks/pretrain_throughput.py --xla both --rounds 1    # XLA on and off
  python benchmarks/pretrain_throughput.py --size tiny --no-peer
  python benchmarks/pretrain_throughput.py --curve-only --curve-steps 60
"""
import os
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402  (sets sys.path and the TF log level)

VOCAB = 30522
# The peer's "tiny" (its SIZES["tiny"]); "small" and "base" are Table 6 sizes.
TINY = dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=2, intermediate_size=512)


limit_dtype = common.limit_dtype  # the matmul limit a compute dtype is compared with


def config_hparams(size: str, batch: int, seq: int, dtype: str, xla: bool, **extra) -> dict:
    hparams = dict(model_size="base" if size == "base" else "small", vocab_size=VOCAB,
                   train_batch_size=batch, max_seq_length=seq, compute_dtype=dtype,
                   use_xla=xla, num_warmup_steps=10, learning_rate=5e-4)
    if size == "tiny":
        hparams.update(embedding_size=128, model_hparam_overrides=dict(TINY))
    hparams.update(extra)
    return hparams


def write_synthetic_tfrecords(directory: str, seq: int, count: int = 512, seed: int = 0,
                              vocab: int = VOCAB) -> str:
    """`count` examples like the peer's batches: random word ids below `vocab`, [CLS] ...
    [SEP], no padding."""
    import numpy as np
    from pretrain import pretrain_data
    rng = np.random.RandomState(seed)
    records = []
    for _ in range(count):
        ids = rng.randint(common.FIRST_WORD_ID, vocab, seq)
        ids[0], ids[-1] = common.CLS_ID, common.SEP_ID
        records.append(pretrain_data.serialize_example(ids.tolist(), [1] * seq, [0] * seq))
    path = os.path.join(directory, pretrain_data.shard_name(0, 1))
    pretrain_data.write_examples(path, records)
    return path


def build_trainer(data_dir: str, hparams: dict):
    from configure_pretraining import PretrainingConfig
    from pretrain import masking
    from pretrain.trainer import Trainer
    config = PretrainingConfig.from_hparams("bench", data_dir, hparams)
    special = masking.SpecialIds(pad=common.PAD_ID, cls=common.CLS_ID, sep=common.SEP_ID,
                                 mask=common.MASK_ID)
    return Trainer(config, special)


class Ours:
    """One configuration of our step: built and warmed up once, timed in several rounds."""

    def __init__(self, name: str, data_dir: str, files: list[str], hparams: dict, warmup: int):
        self.name, self.hparams = name, hparams
        self.trainer = build_trainer(data_dir, hparams)
        self.config = self.trainer.config
        self.iterator = self.trainer.train_iterator(files)
        start = time.perf_counter()
        self.trainer.train_steps(self.iterator, 1)
        self.first_step_s = time.perf_counter() - start  # tracing (+ XLA compile) + one step
        for _ in range(max(0, warmup - 1)):
            self.trainer.train_steps(self.iterator, 1)
        self.times: list[float] = []
        self.cpu: list[float] = []
        self.loads: list[float] = []
        self.rounds: list[tuple[list[float], float]] = []  # (step times, matmul limit)
        self.limits: list[dict[str, float]] = []  # per round: both limits (common.block_start)

    def time_steps(self, steps: int, load: float, limit: float = 0.0,
                   limits: dict[str, float] | None = None) -> None:
        """One round: `steps` timed steps. limit: the matmul limit of our dtype, or taken from
        limits (both dtypes' limits, measured just before, recorded in self.limits)."""
        if limits:
            self.limits.append(limits)
            limit = limits[limit_dtype(self.hparams["compute_dtype"])]
        self.loads.append(load)
        self.rounds.append(([], limit))
        for _ in range(steps):
            cpu, start = common.cpu_seconds(), time.perf_counter()
            result = self.trainer.train_steps(self.iterator, 1)
            self.times.append(time.perf_counter() - start)
            self.rounds[-1][0].append(self.times[-1])
            self.cpu.append(common.cpu_seconds() - cpu)
            if not result.finite:
                raise RuntimeError(f"{self.name}: non-finite step {result.bad_metrics}")
        self.last_loss = result.metrics["loss"]


def measure_input_pipeline(files: list[str], batch: int, seq: int, batches: int = 300) -> dict:
    """The training input pipeline alone: batches/s once it runs (prefetch warmed up)."""
    import tensorflow as tf
    from pretrain import input_pipeline
    ds = input_pipeline.train_dataset(files, seed=0, global_batch_size=batch, max_seq_length=seq)
    iterator = iter(ds)
    for _ in range(20):
        next(iterator)
    cpu, start = common.cpu_seconds(), time.perf_counter()
    for _ in range(batches):
        features = next(iterator)
    tf.convert_to_tensor(features["input_ids"]).numpy()
    seconds = time.perf_counter() - start
    return {"batches_per_sec": round(batches / seconds, 1),
            "cpu_ms_per_batch": round((common.cpu_seconds() - cpu) / batches * 1e3, 3)}


def real_text_files(work: str, seq_len: int) -> list[str] | None:
    """tfrecords of the first 2 files of the shared corpus under `work` (None without it)."""
    from pretrain.builder import dataset_builder
    corpus = os.path.join(common.SHARED, "data", "pretrain_corpus")
    vocab = os.path.join(common.SHARED, "data", "vocab", "bert-uncased-vocab.txt")
    if not os.path.isdir(corpus):
        print(f"# curve skipped: no corpus at {corpus}")
        return None
    corpus_dir = os.path.join(work, "corpus")
    os.makedirs(corpus_dir)
    for name in sorted(os.listdir(corpus))[:2]:
        os.symlink(os.path.join(corpus, name), os.path.join(corpus_dir, name))
    out = os.path.join(work, "real", "pretrain_tfrecords")
    dataset_builder.build_dataset(dataset_builder.BuildConfig(
        corpus_dir=corpus_dir, output_dir=out, vocab_file=vocab, max_seq_length=seq_len,
        num_out_files=2, eval_fraction=0.0, show_progress=False, log=lambda m: None))
    return sorted(os.path.join(out, f) for f in os.listdir(out) if "tfrecord" in f)


def curve_hparams(args, dtype: str, seed: int) -> dict:
    """A short run that learns (bias-corrected Adam, 10 warm-up steps) on real text."""
    return config_hparams(args.size, args.batch, args.seq_len, dtype, False, seed=seed,
                          num_warmup_steps=10, adam_bias_correction=True,
                          lr_decay_after_warmup=True, num_train_steps=max(100, args.curve_steps))


def train_losses(trainer, files: list[str], steps: int) -> list[float]:
    iterator = trainer.train_iterator(files)
    return [trainer.train_steps(iterator, 1).metrics["loss"] for _ in range(steps)]


def run_curve(args, work: str) -> list[dict]:
    """A short run on real text: float32, bfloat16 (same seed) and float32 with another seed."""
    files = real_text_files(work, args.seq_len)
    if files is None:
        return []
    runs = [("float32", 0), ("bfloat16", 0), ("float32", 1)]
    curves = {}
    for dtype, seed in runs:
        trainer = build_trainer(os.path.join(work, "real"), curve_hparams(args, dtype, seed))
        losses = train_losses(trainer, files, args.curve_steps)
        curves[(dtype, seed)] = losses
        print(f"# curve {dtype} seed {seed}: " + " ".join(f"{x:.2f}" for x in losses),
              flush=True)
    ref, low, other = curves[runs[0]], curves[runs[1]], curves[runs[2]]
    tail = max(1, args.curve_steps // 4)
    row = {"benchmark": "pretrain_precision_curve", "size": args.size, "batch": args.batch,
           "seq_len": args.seq_len, "steps": args.curve_steps,
           "mean_abs_diff_bf16_vs_fp32": round(statistics.fmean(
               abs(a - b) for a, b in zip(ref, low)), 4),
           "mean_abs_diff_seed_vs_seed_fp32": round(statistics.fmean(
               abs(a - b) for a, b in zip(ref, other)), 4),
           "last_quarter_mean_loss": {"float32": round(statistics.fmean(ref[-tail:]), 4),
                                      "bfloat16": round(statistics.fmean(low[-tail:]), 4),
                                      "float32_seed1": round(statistics.fmean(other[-tail:]), 4)},
           "first_loss": round(ref[0], 4)}
    common.emit(row)
    return [row]


def main() -> None:
    parser = common.arg_parser(__doc__, batch=16)
    common.add_round_args(parser, steps=12, warmup=3, peer_configs=tuple(common.PEER_CONFIGS))
    parser.add_argument("--curve-steps", type=int, default=0,
                        help="also train this many steps on real text: fp32 vs bf16 vs seed")
    parser.add_argument("--curve-only", action="store_true",
                        help="only the training curve (--curve-steps), no throughput")
    parser.add_argument("--hparams", default="{}",
                        help="extra pre-training hparams (JSON), e.g. gradient_accumulation_steps")
    args = parser.parse_args()

    common.set_threads(args.threads)
    from util.hparams import parse_hparams_arg
    extra = parse_hparams_arg(args.hparams)
    machine = common.print_machine()
    work = tempfile.mkdtemp(prefix="pretrain_throughput_")
    try:
        if args.curve_only:
            run_curve(args, work)
            return
        _measure_steps(args, work, extra)
        if args.curve_steps:
            run_curve(args, work)
        common.print_machine_end(machine)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _measure_steps(args, work: str, extra: dict) -> None:
    """Our steps in each dtype and XLA setting, the peer's in alternating rounds, and the
    input pipeline alone; the rows emitted and tabled."""
    dtypes, xlas = common.dtypes_and_xlas(args)
    use_peer = common.use_peer(args.no_peer)
    load = common.load_average()
    limits = {d: common.matmul_limit(d) for d in ("float32", "bfloat16")}
    print(f"# matmul limit (2048^3, graph mode): float32 {limits['float32']:.0f} GFLOP/s, "
          f"bfloat16 {limits['bfloat16']:.0f} GFLOP/s (load {load:.2f}; measured again "
          "before every timed block)", flush=True)
    files = [write_synthetic_tfrecords(work, args.seq_len)]
    configs = []
    for xla in xlas:
        for dtype in dtypes:
            name = f"{dtype}{' xla' if xla else ''}"
            start = time.perf_counter()
            configs.append(Ours(name, work, files, config_hparams(
                args.size, args.batch, args.seq_len, dtype, xla, **extra), args.warmup))
            print(f"# built {name}: first step {configs[-1].first_step_s:.1f} s "
                  f"(total {time.perf_counter() - start:.1f} s)", flush=True)
    cfg = configs[0].config
    flops = common.pretrain_flops(cfg.bert_config(), cfg.generator_config(), args.batch,
                                  args.seq_len, cfg.max_predictions_per_seq)
    peer_rows = []
    for r in range(args.rounds):
        for ours in configs:
            load, limits = common.block_start(args, f"(round {r + 1}: ours {ours.name})")
            ours.time_steps(args.steps, load, limits=limits)
            print(f"# round {r + 1} ours {ours.name}: median "
                  f"{statistics.median(ours.times[-args.steps:]) * 1e3:.0f} ms "
                  f"(limits {limits['float32']:.0f}/{limits['bfloat16']:.0f} GFLOP/s)",
                  flush=True)
        if use_peer and args.size != "base":
            peer_rows += common.peer_rounds("hf_pretrain_bench.py", args, r)
    rows = _our_rows(args, configs, flops, peer_rows, extra, cfg.max_predictions_per_seq)
    rows += _peer_rows(args, peer_rows, flops)
    pipeline_row, fastest = _pipeline_row(args, files, configs)
    _print_tables(args, rows, flops, pipeline_row, fastest)


def _our_rows(args, configs: list, flops: dict, peer_rows: list, extra: dict,
              n_pred: int) -> list[dict]:
    rows = []
    for ours in configs:
        row = {"benchmark": "electra_pretrain_step", "impl": "ours-tf", "size": args.size,
               "dtype": ours.hparams["compute_dtype"], "xla": ours.hparams["use_xla"],
               "batch": args.batch, "seq_len": args.seq_len, "masked_per_seq": n_pred,
               "threads": args.threads}
        row.update(common.summarize(ours.times, args.batch, args.seq_len, flops, ours.rounds))
        row["cpu_ms_per_step_median"] = round(statistics.median(ours.cpu) * 1e3, 1)
        row["first_step_s"] = round(ours.first_step_s, 1)
        # 1 = the whole train loop was traced once and never again (no retracing).
        loop_fn = ours.trainer.engine._loop_fn  # pylint: disable=protected-access
        row["traces"] = loop_fn.experimental_get_tracing_count()
        row["load_before"] = ours.loads
        row.update(common.limit_fields(ours.limits))
        row["last_loss"] = round(ours.last_loss, 4)
        row.update(common.peer_comparison(row["sequences_per_sec"], args.batch, ours.rounds,
                                          peer_rows))
        if extra:
            row["hparams"] = extra
        rows.append(row)
        common.emit(row)
    return rows


def _peer_rows(args, peer_rows: list, flops: dict) -> list[dict]:
    rows = []
    for peer in peer_rows:
        row = common.peer_row(
            "electra_pretrain_step", args, peer, flops["appendix_e"],
            shape_fields={"masked_per_seq": peer["masked_per_seq"]},
            flops_fields={
                "paper_formula_flops_per_step": peer["paper_formula_train_flops_per_step"],
                "paper_formula_gflops": peer["paper_formula_gflops"]})
        if peer["train_flops_per_step"] != flops["executed"]:
            row["flops_mismatch"] = f"ours counts {flops['executed']} executed FLOPs"
        rows.append(row)
        common.emit(row)
    return rows


def _pipeline_row(args, files: list[str], configs: list) -> tuple[dict, object]:
    """The input pipeline alone against the fastest of our steps; (row, that configuration)."""
    pipeline = measure_input_pipeline(files, args.batch, args.seq_len)
    fastest = max(configs, key=lambda c: args.batch / statistics.median(c.times))
    steps_per_sec = 1.0 / statistics.median(fastest.times)
    row = {"benchmark": "pretrain_input_pipeline", "batch": args.batch,
           "seq_len": args.seq_len, **pipeline,
           "fastest_step": fastest.name,
           "steps_per_sec": round(steps_per_sec, 3),
           "pipeline_over_step": round(pipeline["batches_per_sec"] / steps_per_sec, 1),
           "load_after": round(common.load_average(), 2)}
    common.emit(row)
    return row, fastest


def _print_tables(args, rows: list, flops: dict, pipeline_row: dict, fastest) -> None:
    print()
    print(f"ELECTRA-{args.size} pre-training step, batch {args.batch}, seq {args.seq_len}, "
          f"{args.threads} threads; FLOPs: Appendix E = matmuls 2mnk, train 3x forward, dense "
          f"embeddings ({flops['appendix_e']:.3e} FLOPs/step); executed = the peer's "
          f"convention ({flops['executed']:.3e}); {common.THROUGHPUT_TABLE_NOTE}")
    print(common.throughput_table(
        rows, (("paper_formula_gflops", "GFLOP/s (official formula)"),)))
    print(f"\ninput pipeline alone: {pipeline_row['batches_per_sec']} batches/s "
          f"({pipeline_row['cpu_ms_per_batch']} CPU-ms each) = "
          f"{pipeline_row['pipeline_over_step']}x the fastest step ({fastest.name})")


if __name__ == "__main__":
    main()
