"""Fine-tuning step throughput (sequence classification), side by side with the HF PyTorch peer.

Our step is the real one: finetune/trainer.py ModelRunner's train function (encoder + SST-2's
classification head, loss summed over the batch, backward, clipping, AdamW with layer-wise
learning rates), built from a real FinetuningConfig with random initial weights and fed
synthetic batches (random ids, [CLS] ... [SEP], no padding; the peer's batches). Timing: one step
per call after warm-up, alternating with the peer (same size, batch, sequence length, threads)
in every configuration of --peer-configs (fp32, bf16 = autocast; default both), load average
and both matmul limits (float32, bfloat16) measured before each timed block; a row's fraction of
limit uses its dtype's. FLOPs conventions: benchmarks/common.py (the peer's head has one more
H x H dense layer than the official head: its executed count is given as
`peer_executed_flops_per_step`).

  python benchmarks/finetune_throughput.py            # Small, batch 32, seq 128, fp32 + bf16
  python benchmarks/finetune_throughput.py --rounds 3 --peer-configs fp32,bf16
  python benchmarks/finetune_throughput.py --xla both --rounds 1
  python benchmarks/finetune_throughput.py --size tiny --no-peer
"""
import os
import statistics
import sys
import tempfile
import time
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

VOCAB_FILE = os.path.join(common.SHARED, "data", "vocab", "bert-uncased-vocab.txt")
TINY = dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=2, intermediate_size=512)


def finetune_config(work: str, size: str, batch: int, seq: int, dtype: str, xla: bool,
                    **extra):
    """SST-2's fine-tuning config at this size and shape; `extra`: more hparams."""
    import configure_finetuning
    hparams = dict(model_size="base" if size == "base" else "small", task_names=["sst"],
                   vocab_file=VOCAB_FILE, vocab_size=30522, init_checkpoint="",
                   train_batch_size=batch, max_seq_length=seq, compute_dtype=dtype,
                   use_xla=xla, model_dir=os.path.join(work, f"model_{dtype}_{xla}"), **extra)
    if size == "tiny":
        hparams.update(embedding_size=128, model_hparam_overrides=dict(TINY))
    return configure_finetuning.FinetuningConfig.from_hparams("bench", work, hparams)


def synthetic_dataset(batch: int, seq: int, num_labels: int, seed: int = 0):
    """Endless batches of the classification features (the peer's kind of input)."""
    import numpy as np
    import tensorflow as tf
    rng = np.random.RandomState(seed)
    n = 8 * batch
    ids = rng.randint(common.FIRST_WORD_ID, 30522, (n, seq)).astype(np.int32)
    ids[:, 0], ids[:, -1] = common.CLS_ID, common.SEP_ID
    features = {"input_ids": ids, "input_mask": np.ones((n, seq), np.int32),
                "segment_ids": np.zeros((n, seq), np.int32),
                "task_id": np.zeros(n, np.int32),
                "sst_eid": np.arange(n, dtype=np.int32),
                "sst_label_ids": rng.randint(0, num_labels, n).astype(np.int32)}
    return (tf.data.Dataset.from_tensor_slices(features).repeat()
            .batch(batch, drop_remainder=True).prefetch(tf.data.AUTOTUNE))


class StubPreprocessor:
    """What ModelRunner asks of a preprocessor to plan training; the data comes from us."""

    def __init__(self, batch: int):
        self.batch = batch

    def prepare_train(self):
        return types.SimpleNamespace(steps_per_epoch=10000, batch_size=self.batch, n_real=0)


def build_runner(work: str, size: str, batch: int, seq: int, dtype: str, xla: bool,
                 training: bool = True):
    from finetune import task_builder
    from finetune.trainer import ModelRunner
    config = finetune_config(work, size, batch, seq, dtype, xla)
    config.do_train = training
    tasks = task_builder.get_tasks(config)
    return ModelRunner(config, tasks, StubPreprocessor(batch), trial=1)


class Ours:
    def __init__(self, work: str, size: str, batch: int, seq: int, dtype: str, xla: bool,
                 warmup: int):
        self.name = f"{dtype}{' xla' if xla else ''}"
        self.dtype, self.xla = dtype, xla
        self.runner = build_runner(work, size, batch, seq, dtype, xla)
        self.engine = self.runner.engine
        self.iterator = iter(synthetic_dataset(batch, seq, 2))
        start = time.perf_counter()
        self._step()
        self.first_step_s = time.perf_counter() - start
        for _ in range(max(0, warmup - 1)):
            self._step()
        self.times, self.loads = [], []
        self.rounds: list[tuple[list[float], float]] = []  # (step times, matmul limit)
        self.limits: list[dict[str, float]] = []  # per round: both limits (common.block_start)

    def _step(self) -> float:
        return float(self.engine.run(self.iterator, 1).sums["loss"])

    def time_steps(self, steps: int, load: float, limits: dict[str, float]) -> None:
        """One round: `steps` timed steps; limits: both matmul limits measured just before."""
        self.loads.append(load)
        self.limits.append(limits)
        self.rounds.append(([], limits[common.limit_dtype(self.dtype)]))
        for _ in range(steps):
            start = time.perf_counter()
            self.last_loss = self._step()
            self.times.append(time.perf_counter() - start)
            self.rounds[-1][0].append(self.times[-1])


def main() -> None:
    parser = common.arg_parser(__doc__, batch=32)
    common.add_round_args(parser, steps=10, warmup=3)
    args = parser.parse_args()

    common.set_threads(args.threads)
    machine = common.print_machine()
    dtypes, xlas = common.dtypes_and_xlas(args)
    use_peer = common.use_peer(args.no_peer) and args.size != "base"
    work = tempfile.mkdtemp(prefix="finetune_throughput_")

    load = common.load_average()
    limits = {d: common.matmul_limit(d) for d in ("float32", "bfloat16")}
    print(f"# matmul limit: float32 {limits['float32']:.0f} GFLOP/s, bfloat16 "
          f"{limits['bfloat16']:.0f} GFLOP/s (load {load:.2f}; measured again before every "
          "timed block)", flush=True)
    configs = []
    for xla in xlas:
        for dtype in dtypes:
            configs.append(Ours(work, args.size, args.batch, args.seq_len, dtype, xla,
                                args.warmup))
            print(f"# built {configs[-1].name}: first step {configs[-1].first_step_s:.1f} s",
                  flush=True)
    flops = common.finetune_flops(configs[0].runner.model.bert_config, args.batch,
                                  args.seq_len, 2)

    peer_rows = []
    for r in range(args.rounds):
        for ours in configs:
            load, limits = common.block_start(args, f"(round {r + 1}: ours {ours.name})")
            ours.time_steps(args.steps, load, limits)
            print(f"# round {r + 1} ours {ours.name}: median "
                  f"{statistics.median(ours.times[-args.steps:]) * 1e3:.0f} ms (limits "
                  f"{limits['float32']:.0f}/{limits['bfloat16']:.0f} GFLOP/s)", flush=True)
        if use_peer:
            peer_rows += common.peer_rounds("hf_finetune_bench.py", args, r)

    rows = []
    for ours in configs:
        row = {"benchmark": "electra_finetune_seqcls_step", "impl": "ours-tf", "size": args.size,
               "dtype": ours.dtype, "xla": ours.xla, "batch": args.batch,
               "seq_len": args.seq_len, "threads": args.threads}
        row.update(common.summarize(ours.times, args.batch, args.seq_len, flops, ours.rounds))
        loop_fn = ours.engine._loop_fn  # pylint: disable=protected-access
        row.update(first_step_s=round(ours.first_step_s, 1), load_before=ours.loads,
                   traces=loop_fn.experimental_get_tracing_count(),
                   last_loss=round(ours.last_loss, 4), **common.limit_fields(ours.limits))
        row.update(common.peer_comparison(row["sequences_per_sec"], args.batch, ours.rounds,
                                          peer_rows))
        rows.append(row)
        common.emit(row)
    for peer in peer_rows:
        row = common.peer_row("electra_finetune_seqcls_step", args, peer, flops["appendix_e"])
        if peer["train_flops_per_step"] != flops["peer_executed"]:
            row["flops_mismatch"] = f"ours counts {flops['peer_executed']} for the peer's head"
        rows.append(row)
        common.emit(row)

    print()
    print(f"ELECTRA-{args.size} fine-tuning step (sequence classification), batch {args.batch}, "
          f"seq {args.seq_len}, {args.threads} threads; {common.THROUGHPUT_TABLE_NOTE}")
    print(common.throughput_table(rows))
    common.print_machine_end(machine)


if __name__ == "__main__":
    main()
