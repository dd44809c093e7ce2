"""Helpers shared by the speed benchmarks: machine state, matmul limit, FLOPs, the peer, output.

FLOPs conventions (all per optimizer step, generator + discriminator, N = max_predictions_per_seq
masked positions per sequence go through the generator's vocabulary projection):

- `appendix_e` (the key `train_flops_per_step`): the paper's Appendix E counting as the issue
  states it: matrix multiplies as 2*m*n*k, backward = 2 x forward (train = 3 x forward), embedding
  lookups counted as dense one-hot matmuls (word 2*E*V, position 2*E*L, token type 2*E*2 per
  token, for both networks). Only matmul-shaped work is counted.
- `executed`: the matmuls the step really executes, 2*m*n*k, train = 3 x forward, lookups not
  counted. This is the Hugging Face peer's `train_flops_per_step` convention (the benchmark checks
  the two agree for the peer's configuration), and the only count that may be compared with a
  matmul limit: `fraction_of_limit` = executed FLOP/s / the limit measured in the same run.
- `paper_formula`: the official flops_computation.py formula (train = 2 x forward, non-matmul
  ops counted, output softmax on 15.625% of the tokens); the peer's
  `paper_formula_train_flops_per_step`.
"""
import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

SHARED = os.path.join(os.path.dirname(ROOT), "shared")
PEER_DIR = os.path.join(SHARED, "peers")
PEER_PYTHON = os.path.join(os.path.dirname(ROOT), "peer-venv", "bin", "python")
# BERT uncased ids (the peer's): synthetic batches use them so both sides mask alike.
PAD_ID, CLS_ID, SEP_ID, MASK_ID = 0, 101, 102, 103
FIRST_WORD_ID = 999  # the peer draws tokens from [999, vocab)

# official flops_computation.py constants (non-matmul op counts)
_DROPOUT, _LAYER_NORM, _ACTIVATION, _SOFTMAX = 4, 5, 8, 5


# ---------------------------------------------------------------------------------------------
# Command line.

def arg_parser(doc: str, batch: int | None, size: str = "small",
               seq_len: int = 128) -> argparse.ArgumentParser:
    """A parser with the model shape flags: --size, --batch (unless None) and --seq-len."""
    parser = argparse.ArgumentParser(description=doc,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", choices=["small", "tiny", "base"], default=size)
    if batch is not None:
        parser.add_argument("--batch", type=int, default=batch)
    parser.add_argument("--seq-len", type=int, default=seq_len)
    return parser


def add_round_args(parser: argparse.ArgumentParser, steps: int, warmup: int, xla: str = "off",
                   unit: str = "steps", peer: bool = True,
                   warmup_help: str | None = "untimed steps (first one traces)",
                   peer_configs: tuple[str, ...] = ("fp32", "bf16")) -> None:
    """Flags of a benchmark that times its configurations (and the peer) in alternating rounds.

    unit: what one timed call is ("steps" or "calls"); the flag that counts them is --<unit>.
    peer_configs: the peer configurations --peer-configs accepts (PEER_CONFIGS names); it
    defaults to fp32,bf16 and parses to a list.
    """
    parser.add_argument("--dtypes", default="float32,bfloat16")
    parser.add_argument("--xla", choices=["off", "on", "both"], default=xla)
    parser.add_argument(f"--{unit}", type=int, default=steps, help=f"timed {unit} per round")
    parser.add_argument("--warmup", type=int, default=warmup, help=warmup_help)
    parser.add_argument("--rounds", type=int, default=2,
                        help="alternations ours / peer" if peer else None)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    if peer:
        parser.add_argument("--no-peer", action="store_true")
        parser.add_argument("--peer-configs", type=peer_config_list(peer_configs),
                            default="fp32,bf16",
                            help="the peer's configurations, each run in every round: "
                                 + ", ".join(peer_configs))
    parser.add_argument("--idle-load", type=float, default=1.5)
    parser.add_argument("--max-wait", type=float, default=240.0,
                        help="seconds to wait for the load to fall below --idle-load")


def dtypes_and_xlas(args: argparse.Namespace) -> tuple[list[str], list[bool]]:
    """The compute dtypes (--dtypes) and XLA settings (--xla) to measure."""
    dtypes = [d.strip() for d in args.dtypes.split(",") if d.strip()]
    return dtypes, {"off": [False], "on": [True], "both": [False, True]}[args.xla]


# ---------------------------------------------------------------------------------------------
# Machine state.

def load_average() -> float:
    return os.getloadavg()[0]


def wait_for_idle(threshold: float, max_wait: float, label: str = "") -> float:
    """Polls the 1-minute load average until it is below `threshold` (at most `max_wait` s).

    Prints the load it starts and ends at; returns the load when measuring starts.
    """
    start = time.monotonic()
    load = load_average()
    first = load
    while load >= threshold and time.monotonic() - start < max_wait:
        time.sleep(min(10.0, max(0.0, max_wait - (time.monotonic() - start))))
        load = load_average()
    waited = time.monotonic() - start
    note = "" if load < threshold else f" (still >= {threshold}: measuring anyway, pessimistic)"
    print(f"# load {first:.2f} -> {load:.2f} after {waited:.0f} s wait{note} {label}",
          file=sys.stderr, flush=True)
    return round(load, 2)


def machine_summary() -> dict:
    model, flags = "unknown", set()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name") and model == "unknown":
                    model = line.split(":", 1)[1].strip()
                elif line.startswith("flags") and not flags:
                    flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    wanted = ["avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16", "amx_tile"]
    return {"nproc": os.cpu_count(), "cpu": model,
            "cpu_flags": [f for f in wanted if f in flags],
            "python": sys.version.split()[0],
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}


def print_machine(extra: str = "") -> dict:
    import tensorflow as tf
    machine = machine_summary()
    machine["tensorflow"] = tf.__version__
    print(f"# machine: {machine['nproc']} cores, {machine['cpu']}, flags "
          f"{' '.join(machine['cpu_flags'])}; python {machine['python']}, TF "
          f"{machine['tensorflow']}; {machine['date']}; load {load_average():.2f} {extra}",
          flush=True)
    return machine


def print_machine_end(machine: dict) -> None:
    """The last line of a report: the machine (from print_machine) and the load at the end."""
    print(f"\n# machine {json.dumps(machine)}; load at end {load_average():.2f}")


def set_threads(threads: int) -> None:
    """Same thread count as the peer's torch.set_num_threads (must run before any TF op)."""
    import tensorflow as tf
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(threads)


def max_rss_mb() -> float:
    import resource
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, 1)


def cpu_seconds() -> float:
    """User + system CPU time of this process (robust-ish on a shared machine)."""
    return time.process_time()


def median_call_ms(fn, args, calls: int) -> float:
    """Median wall ms of `fn(*args)` over `calls` calls after 3 untimed ones, its outputs copied
    to the host each time."""
    import tensorflow as tf
    for _ in range(3):
        tf.nest.map_structure(lambda t: t.numpy(), fn(*args))
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        tf.nest.map_structure(lambda t: t.numpy(), fn(*args))
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


# ---------------------------------------------------------------------------------------------
# The machine's matmul limit, measured in the same run.

def matmul_limit(dtype: str, n: int = 2048, repeats: int = 6) -> float:
    """GFLOP/s of an n x n x n matmul in graph mode, best of `repeats` (float32 or bfloat16)."""
    import tensorflow as tf
    tf_dtype = tf.as_dtype(dtype)
    a = tf.cast(tf.random.stateless_normal([n, n], seed=[1, 2]), tf_dtype)
    b = tf.cast(tf.random.stateless_normal([n, n], seed=[3, 4]), tf_dtype)
    fn = tf.function(lambda x, y: tf.reduce_sum(tf.cast(tf.matmul(x, y)[:1, :1], tf.float32)))
    fn(a, b).numpy()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn(a, b).numpy()
        best = min(best, time.perf_counter() - start)
    return 2.0 * n ** 3 / best / 1e9


# ---------------------------------------------------------------------------------------------
# FLOPs.

def _layer_matmuls(hidden: int, ffn: int, seq: int) -> int:
    """Forward matmul FLOPs of one Transformer layer for one sequence."""
    return (2 * seq * hidden * 3 * hidden  # Q, K, V
            + 2 * 2 * seq * seq * hidden  # scores and probs @ V, all heads
            + 2 * seq * hidden * hidden  # attention output
            + 2 * 2 * seq * hidden * ffn)  # FFN in and out


def encoder_forward_flops(cfg, seq: int, dense_embeddings: bool) -> int:
    """Forward FLOPs of one BertConfig encoder on one sequence (no heads)."""
    e, h = cfg.embedding_size, cfg.hidden_size
    flops = cfg.num_hidden_layers * _layer_matmuls(h, cfg.intermediate_size, seq)
    if e != h:
        flops += 2 * seq * e * h  # embeddings_project
    if dense_embeddings:
        flops += seq * 2 * e * (cfg.vocab_size + seq + cfg.type_vocab_size)
    return flops


def pretrain_flops(disc_cfg, gen_cfg, batch: int, seq: int, n_pred: int) -> dict:
    """FLOPs of one ELECTRA pre-training step in the three conventions (module docstring)."""
    v, e = disc_cfg.vocab_size, disc_cfg.embedding_size
    h_d, h_g = disc_cfg.hidden_size, gen_cfg.hidden_size
    disc_head = 2 * seq * h_d * h_d + 2 * seq * h_d
    gen_head = 2 * n_pred * h_g * e + 2 * n_pred * e * v

    def forward(dense: bool) -> int:
        return (encoder_forward_flops(disc_cfg, seq, dense) + disc_head
                + encoder_forward_flops(gen_cfg, seq, dense) + gen_head)

    paper = (_official_train_flops(h_d, disc_cfg.num_hidden_layers, seq, v, e, batch, True)
             + _official_train_flops(h_g, gen_cfg.num_hidden_layers, seq, v, e, batch, False))
    return {"appendix_e": 3 * batch * forward(True), "executed": 3 * batch * forward(False),
            "paper_formula": int(paper)}


def finetune_flops(cfg, batch: int, seq: int, num_labels: int) -> dict:
    """One classification fine-tuning step; head = the peer's (dense H x H on [CLS] + logits)."""
    head = 2 * cfg.hidden_size * cfg.hidden_size + 2 * cfg.hidden_size * num_labels
    ours_head = 2 * cfg.hidden_size * num_labels  # official head: one dense layer on [CLS]

    def forward(dense: bool, head_flops: int) -> int:
        return encoder_forward_flops(cfg, seq, dense) + head_flops

    return {"appendix_e": 3 * batch * forward(True, ours_head),
            "executed": 3 * batch * forward(False, ours_head),
            "peer_executed": 3 * batch * forward(False, head)}


def inference_flops(cfg, seq: int, num_labels: int) -> dict:
    head = 2 * cfg.hidden_size * num_labels
    return {"appendix_e": encoder_forward_flops(cfg, seq, True) + head,
            "executed": encoder_forward_flops(cfg, seq, False) + head}


def _official_train_flops(h, layers, s, v, e, batch, discriminator, output_frac=0.15625) -> float:
    """official flops_computation.py get_train_flops for one step (our restatement)."""
    i, heads = 4 * h, max(h // 64, 1)
    per_token_block = (
        6 * h * h + 3 * h + 2 * h * s + _SOFTMAX * s * heads + _DROPOUT * s * heads + s * heads
        + 2 * h * s + 2 * h * h + h + _DROPOUT * h + h + _LAYER_NORM
        + 2 * h * i + _ACTIVATION * i + i + 2 * h * i + h + _DROPOUT * h + h + _LAYER_NORM * h)
    embed = 2 * e * v + 2 * e * (s + 2) + 2 * e + _LAYER_NORM * e + _DROPOUT * e
    if e != h:
        embed += 2 * h * e + h
    if discriminator:
        head = 2 * h * h + h + _ACTIVATION * h + 2 * h
    else:
        head = output_frac * (2 * e * v + 2 * h * e + e + _ACTIVATION * e + _LAYER_NORM * e
                              + _SOFTMAX * v + 2 * v)
    return 2 * batch * s * (layers * per_token_block + embed + head)


# ---------------------------------------------------------------------------------------------
# Timing summaries and output.

def summarize(times: list[float], batch: int, seq: int, flops: dict,
              rounds: list[tuple[list[float], float]] | None = None) -> dict:
    """Throughput figures of a list of per-step wall times (seconds).

    rounds: (that round's step times, the matmul limit in GFLOP/s measured just before it); the
    machine's speed drifts (other tenants), so each round is compared with its own limit and the
    median fraction is reported.
    """
    med = statistics.median(times)
    row = {"steps_timed": len(times),
           "step_ms_median": round(med * 1e3, 2),
           "step_ms_min": round(min(times) * 1e3, 2),
           "step_ms_max": round(max(times) * 1e3, 2),
           "sequences_per_sec": round(batch / med, 3),
           "tokens_per_sec": round(batch * seq / med, 1)}
    if flops:
        row["train_flops_per_step"] = int(flops["appendix_e"])
        row["achieved_gflops"] = round(flops["appendix_e"] / med / 1e9, 2)
        row["executed_flops_per_step"] = int(flops["executed"])
        row["achieved_gflops_executed"] = round(flops["executed"] / med / 1e9, 2)
        if "paper_formula" in flops:
            row["paper_formula_flops_per_step"] = int(flops["paper_formula"])
            row["paper_formula_gflops"] = round(flops["paper_formula"] / med / 1e9, 2)
        if rounds:
            row["limit_gflops"] = round(statistics.median(limit for _, limit in rounds), 1)
            row["fraction_of_limit"] = round(statistics.median(
                flops["executed"] / statistics.median(t) / 1e9 / limit for t, limit in rounds), 3)
    return row


def emit(row: dict) -> None:
    """One JSON line per measured configuration (grep '^{' to collect them)."""
    print(json.dumps(row, sort_keys=False), flush=True)


def markdown_table(rows: list[dict], columns: list[tuple[str, str]]) -> str:
    """columns: (key, header) pairs; missing values print as '-'."""
    def fmt(value):
        if value is None:
            return "-"
        if isinstance(value, float):
            return f"{value:,.3f}" if abs(value) < 10 else f"{value:,.1f}"
        return str(value)

    lines = ["| " + " | ".join(h for _, h in columns) + " |",
             "|" + "---|" * len(columns)]
    for row in rows:
        lines.append("| " + " | ".join(fmt(row.get(k)) for k, _ in columns) + " |")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# The Hugging Face PyTorch peer (a measuring instrument in ../shared/peers, own venv).

def peer_available() -> str | None:
    """None if the peer can run, else why not."""
    if not os.path.isfile(PEER_PYTHON):
        venv = os.path.dirname(os.path.dirname(PEER_PYTHON))
        return (f"no peer venv at {PEER_PYTHON}: run "
                f"`bash {os.path.join(PEER_DIR, 'setup.sh')} {venv}`")
    return None


def run_peer(script: str, args: list[str], timeout: float = 1800.0) -> dict:
    """Runs a peer benchmark script with the peer's python; returns its JSON line (raises
    RuntimeError on failure). script: a file in ../shared/peers, or an absolute path (our
    benchmarks/peer_inference_latency.py, which the project never imports)."""
    cmd = [PEER_PYTHON, os.path.join(PEER_DIR, script)] + [str(a) for a in args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False,
                          cwd=PEER_DIR)
    if proc.returncode != 0:
        raise RuntimeError(f"peer {' '.join(cmd)} failed ({proc.returncode}):\n"
                           f"{proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def use_peer(no_peer: bool) -> bool:
    """Whether the peer runs: not with --no-peer, nor when it cannot (printed as a comment)."""
    problem = None if no_peer else peer_available()
    if problem:
        print(f"# peer skipped: {problem}")
    return not no_peer and problem is None


# name -> (the dtype its matmuls run in, the peer script's flags); torch.compile only in the
# pre-training script.
PEER_CONFIGS = {"fp32": ("float32", []), "bf16": ("bfloat16", ["--bf16"]),
                "compile": ("float32", ["--compile"]),
                "bf16+compile": ("bfloat16", ["--bf16", "--compile"])}


def peer_config_list(allowed: tuple[str, ...]):
    """An argparse type: comma-separated PEER_CONFIGS names among `allowed` -> a list."""
    def parse(text: str) -> list[str]:
        names = [n.strip() for n in text.split(",") if n.strip()]
        unknown = [n for n in names if n not in allowed]
        if unknown or not names or len(set(names)) != len(names):
            raise argparse.ArgumentTypeError(
                f"{text!r}: a comma-separated list of distinct names from {', '.join(allowed)}")
        return names
    return parse


def config_key(config: str) -> str:
    """A peer configuration's name as a JSON key suffix ("bf16+compile" -> "bf16_compile")."""
    return config.replace("+", "_")


def limit_dtype(compute_dtype: str) -> str:
    """The matmul limit a compute dtype is compared with (float16 has no fast path here)."""
    return "bfloat16" if compute_dtype == "bfloat16" else "float32"


def matmul_limits() -> dict[str, float]:
    """The float32 and the bfloat16 matmul limit (GFLOP/s), measured now."""
    return {dtype: matmul_limit(dtype) for dtype in ("float32", "bfloat16")}


def block_start(args: argparse.Namespace, label: str) -> tuple[float, dict[str, float]]:
    """What precedes every timed block: wait for an idle machine (--idle-load, --max-wait), then
    measure both matmul limits. Returns (the load, the limits)."""
    load = wait_for_idle(args.idle_load, args.max_wait, label)
    return load, matmul_limits()


def limit_fields(limits_per_round: list[dict[str, float]]) -> dict:
    """A row's record of the limits measured before each of its blocks, and their medians."""
    fields = {"limits_per_round": [{d: round(v, 1) for d, v in limits.items()}
                                   for limits in limits_per_round]}
    for dtype in ("float32", "bfloat16"):
        fields[f"limit_gflops_{dtype}"] = round(
            statistics.median(limits[dtype] for limits in limits_per_round), 1)
    return fields


def peer_round(script: str, args: argparse.Namespace, round_index: int,
               config: str = "fp32") -> dict:
    """One peer measurement in round `round_index` (0-based) in configuration `config`
    (PEER_CONFIGS), after waiting for an idle machine and measuring both matmul limits.

    The peer's JSON line plus `load_before`, `limits` (both), `limit` (the one of the config's
    dtype), `peer_config` and `round` (1-based), for `peer_row`.
    """
    load, limits = block_start(args, f"(round {round_index + 1}: peer {config})")
    dtype, flags = PEER_CONFIGS[config]
    peer = run_peer(script, [
        "--size", args.size, "--batch", args.batch, "--seq-len", args.seq_len,
        "--steps", args.steps, "--warmup", args.warmup, "--threads", args.threads, *flags])
    peer.update(load_before=load, limits=limits, limit=limits[dtype], peer_config=config,
                round=round_index + 1)
    print(f"# round {round_index + 1} peer {config}: median {peer['step_ms_median']:.0f} ms "
          f"({peer['sequences_per_sec']:.2f} seq/s; limits {limits['float32']:.0f}/"
          f"{limits['bfloat16']:.0f} GFLOP/s)", flush=True)
    return peer


def peer_rounds(script: str, args: argparse.Namespace, round_index: int) -> list[dict]:
    """Round `round_index` of the peer: one `peer_round` per --peer-configs entry, in order."""
    return [peer_round(script, args, round_index, config) for config in args.peer_configs]


def peer_ratios(ours: float, ours_per_round: list[float], peer_runs: list[dict], key: str,
                higher_is_faster: bool = True, suffix: str = "") -> dict:
    """Ours against each peer configuration in `peer_runs` (`peer_round` results; a run without
    `peer_config` is fp32, without `round` the i-th of its configuration is round i + 1).

    ours: our figure `key` over all rounds; ours_per_round: ours in round 1, 2, ... Per config c:
    `peer_<key>_<c>` (the peer's median over rounds), `ratio_vs_peer_<c><suffix>` (ours against
    it) and `ratio_per_round_<c><suffix>` (each of our rounds against the peer run of the same
    round). Ratios > 1 mean we are faster. {} without peer runs.
    """
    by_config: dict[str, dict[int, dict]] = {}
    for run in peer_runs:
        runs = by_config.setdefault(run.get("peer_config", "fp32"), {})
        runs[run.get("round", len(runs) + 1)] = run

    def ratio(mine: float, theirs: float) -> float:
        return round(mine / theirs if higher_is_faster else theirs / mine, 3)

    fields = {}
    for config, runs in by_config.items():
        name = config_key(config)
        peer_median = statistics.median(run[key] for run in runs.values())
        fields[f"peer_{key}_{name}"] = peer_median
        fields[f"ratio_vs_peer_{name}{suffix}"] = ratio(ours, peer_median)
        fields[f"ratio_per_round_{name}{suffix}"] = [
            ratio(mine, runs[r][key]) for r, mine in enumerate(ours_per_round, 1) if r in runs]
    return fields


def peer_comparison(sequences_per_sec: float, batch: int,
                    rounds: list[tuple[list[float], float]], peer_runs: list[dict]) -> dict:
    """Ours against each peer configuration (`peer_ratios` on sequences/s; rounds: our step
    times per round). Also, as before the configurations existed, `peer_sequences_per_sec` and
    `ratio_per_round` of the float32 peer. {} without a peer."""
    fields = peer_ratios(sequences_per_sec, [batch / statistics.median(t) for t, _ in rounds],
                         peer_runs, "sequences_per_sec")
    if "ratio_vs_peer_fp32" in fields:
        fields = {"peer_sequences_per_sec": fields["peer_sequences_per_sec_fp32"],
                  **fields, "ratio_per_round": fields["ratio_per_round_fp32"]}
    return fields


def peer_row(benchmark: str, args: argparse.Namespace, peer: dict, appendix_e_flops: int,
             shape_fields: dict | None = None, flops_fields: dict | None = None) -> dict:
    """The output row of one peer measurement (from `peer_round`), in our rows' keys.

    appendix_e_flops: our Appendix E count of the step (the peer reports the executed count);
    shape_fields go after seq_len, flops_fields after the executed FLOPs. fraction_of_limit is
    taken against the limit of the run's dtype (bfloat16 for a bf16 run).
    """
    config = peer.get("peer_config", "fp32")
    dtype, flags = PEER_CONFIGS[config]
    return {"benchmark": benchmark, "impl": "peer-hf-pytorch", "size": args.size,
            "dtype": dtype, "compile": "--compile" in flags, "peer_config": config,
            "round": peer.get("round"), "xla": False, "batch": args.batch,
            "seq_len": args.seq_len, **(shape_fields or {}),
            "threads": peer["threads"], "steps_timed": peer["steps_timed"],
            "step_ms_median": peer["step_ms_median"],
            "sequences_per_sec": peer["sequences_per_sec"],
            "tokens_per_sec": peer["tokens_per_sec"],
            "train_flops_per_step": appendix_e_flops,
            "achieved_gflops": round(appendix_e_flops * peer["sequences_per_sec"]
                                     / args.batch / 1e9, 2),
            "executed_flops_per_step": peer["train_flops_per_step"],
            "achieved_gflops_executed": peer["achieved_gflops"],
            **(flops_fields or {}),
            "limit_gflops": round(peer["limit"], 1),
            "fraction_of_limit": round(peer["achieved_gflops"] / peer["limit"], 3),
            **limit_fields([peer["limits"]]),
            "load_before": [peer["load_before"]], "max_rss_mb": peer["max_rss_mb"],
            "torch": peer.get("torch"), "transformers": peer.get("transformers")}


def comparison_columns(rows: list[dict], suffix: str = "",
                       header_suffix: str = "") -> list[tuple[str, str]]:
    """Table columns `x peer <config>` for fp32, bf16 and any other peer configuration the rows
    were compared with, then the per-round ratios (`per_round_text`)."""
    configs = [c for c in PEER_CONFIGS if c in ("fp32", "bf16") or any(
        f"ratio_vs_peer_{config_key(c)}{suffix}" in row for row in rows)]
    return ([(f"ratio_vs_peer_{config_key(c)}{suffix}", f"x peer {c}{header_suffix}")
             for c in configs] + [("per_round_text", "x peer per round")])


def per_round_text(row: dict, suffix: str = "") -> str | None:
    """`fp32 1.31, 1.28; bf16 0.97, 0.99`: a row's per-round ratios for each peer configuration."""
    parts = []
    for config in PEER_CONFIGS:
        values = row.get(f"ratio_per_round_{config_key(config)}{suffix}")
        if values:
            parts.append(f"{config} " + ", ".join(f"{v:.2f}" for v in values))
    return "; ".join(parts) or None


def display_fields(row: dict, suffix: str = "") -> dict:
    """The row with the table's text cells: dtype with `+compile`, per-round ratios, limits."""
    shown = dict(row, per_round_text=per_round_text(row, suffix))
    if row.get("compile"):
        shown["dtype"] = f"{row['dtype']} +compile"
    if row.get("limits_per_round"):
        shown["limits_text"] = ", ".join(f"{limits['float32']:.0f}/{limits['bfloat16']:.0f}"
                                         for limits in row["limits_per_round"])
    return shown


THROUGHPUT_TABLE_NOTE = (
    "of limit = executed GFLOP/s / a 2048^3 matmul's in the row's dtype (bfloat16 for the peer's "
    "bf16 runs), both limits measured just before each timed block (median over rounds); x peer "
    "= our seq/s / the peer's median over rounds, per round against the same round's peer run")


def throughput_table(rows: list[dict], more_flops_columns: tuple[tuple[str, str], ...] = ()) -> str:
    """The markdown table of a side-by-side throughput benchmark (ours and the peer's rows);
    THROUGHPUT_TABLE_NOTE says what its columns mean."""
    return markdown_table([display_fields(row) for row in rows], [
        ("impl", "impl"), ("dtype", "dtype"), ("xla", "xla"), ("round", "round"),
        ("sequences_per_sec", "seq/s"), ("step_ms_median", "step ms (median)"),
        *comparison_columns(rows), ("tokens_per_sec", "tokens/s"),
        ("achieved_gflops", "GFLOP/s (App. E)"), ("achieved_gflops_executed", "GFLOP/s (executed)"),
        *more_flops_columns, ("fraction_of_limit", "of limit"),
        ("limits_text", "limits fp32/bf16 GFLOP/s"), ("load_before", "load")])


def child_json(cmd: list[str], timeout: float = 3600.0) -> dict:
    """Runs one of our benchmark children; returns its last stdout line as JSON."""
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False,
                          cwd=ROOT)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])
