"""The whole fine-tuning job as a user runs it, process start to dev score, ours against the peer.

Ours is `run_finetuning.py` in a subprocess (ELECTRA-Small from random initialisation, its
defaults but for the job's settings below); the peer is the Hugging Face PyTorch user's standard
recipe, ../shared/peers/hf_glue_e2e.py (SST-2) and hf_chunk_e2e.py (CoNLL-2000 chunking), with
the peer's own python (dynamic padding to each batch's longest example; `--bf16` = autocast).
Both get the same job: the first N training rows (written once to a work directory both read),
1 epoch, batch 32, max length 128, lr 3e-4, then the full dev set (SST-2 dev.tsv, 872 rows;
chunking: the only dev file there is, dev_unofficial_ukplab.txt, 1844 sentences). Each process is
timed from outside (Popen to exit) and starts from nothing: a fresh model directory and feature
cache per run. Rounds alternate ours and the peer on every (task, rows, dtype), so the ratio of a
round comes from one machine state.

`--baseline-root DIR` adds ours from another checkout (before/after a change) to every round.
SQuAD 1.1 (`--tasks squadv1`) has no peer here (its standard recipe pads to 384 anyway): it is
measured ours against ours, each `--our-hparams` variant a configuration of its own (e.g. bucketed
against full padding); the first variant is the reference of the `x first` column.

Per run: wall seconds, dev score (SST-2 accuracy, chunk F1, SQuAD F1), mean padded length (ours:
from a "mean padded length" log line if the run prints one, else max_seq_length, the length every
batch is padded to without length buckets), and for ours the phases read from its log timestamps:
start-up (imports, config) to the first log line, preparation (tasks, feature cache, model) to
the training plan, the first step (tracing), the other steps, after training (checkpoint) to the
dev set's featurization, evaluation, exit.

  python benchmarks/finetune_e2e.py --n-train 200 --tasks sst --dtypes float32   # a quick check
  python benchmarks/finetune_e2e.py                      # sst + chunk, 2000 and 8000, fp32 + bf16
  python benchmarks/finetune_e2e.py --tasks squadv1 --n-train 2000 --n-dev 1000 --no-peer \\
      --our-hparams 'full={"HPARAM": ...}' --our-hparams 'bucketed={}'

Writes benchmarks/results/finetune_e2e.json (every run, the machine, the arguments) and prints
a markdown table. Times on a loaded machine are pessimistic for both sides; compare within a round.
"""
import argparse
import datetime
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402  (sets sys.path and the TF log level)

DATA = os.path.join(common.SHARED, "data")
VOCAB_FILE = os.path.join(DATA, "vocab", "bert-uncased-vocab.txt")
SOURCES = {
    "sst": {"train": os.path.join(DATA, "glue", "SST-2", "train.tsv"),
            "dev": os.path.join(DATA, "glue", "SST-2", "dev.tsv")},
    "chunk": {"train": os.path.join(DATA, "chunk", "train.txt"),
              "dev": os.path.join(DATA, "chunk", "dev_unofficial_ukplab.txt")},
    "squadv1": {"train": os.path.join(DATA, "squad", "squadv1", "train.json"),
                "dev": os.path.join(DATA, "squad", "squadv1", "dev.json")},
}
PEER_SCRIPTS = {"sst": "hf_glue_e2e.py", "chunk": "hf_chunk_e2e.py"}
SCORE = {"sst": ("accuracy", "dev_accuracy"), "chunk": ("f1", "dev_f1"),
         "squadv1": ("f1", None)}
PEER_DTYPE_FLAGS = {"float32": [], "bfloat16": ["--bf16"]}

# run_finetuning.py's log: "2026-11-26 22:59:52,064 INFO message"
LOG_LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) \w+ (.*)$")
PADDED_LINE = re.compile(r"mean padded length[^\d]*(\d+(?:\.\d+)?)")


# ---------------------------------------------------------------------------------------------
# The rows both sides read.

def write_sst(source: dict, out: str, n_train: int) -> None:
    """train.tsv: the header and the first n_train rows (all with 0); dev.tsv: whole."""
    with open(source["train"], encoding="utf-8") as f:
        lines = f.readlines()
    keep = lines if n_train <= 0 else lines[:n_train + 1]
    with open(os.path.join(out, "train.tsv"), "w", encoding="utf-8") as f:
        f.writelines(keep)
    shutil.copyfile(source["dev"], os.path.join(out, "dev.tsv"))


def write_chunk(source: dict, out: str, n_train: int) -> None:
    """train.txt: the first n_train sentences (blank-line separated); dev.txt: the dev file."""
    with open(source["train"], encoding="utf-8") as f:
        sentences = [s for s in f.read().split("\n\n") if s.strip()]
    keep = sentences if n_train <= 0 else sentences[:n_train]
    with open(os.path.join(out, "train.txt"), "w", encoding="utf-8") as f:
        f.write("\n\n".join(s.strip("\n") for s in keep) + "\n\n")
    shutil.copyfile(source["dev"], os.path.join(out, "dev.txt"))


def write_squad(source: dict, out: str, n_train: int) -> None:
    """train.json: the paragraphs holding the first n_train questions (the last paragraph cut to
    fit); dev.json: whole (--n-dev limits it through max_eval_examples)."""
    with open(source["train"], encoding="utf-8") as f:
        data = json.load(f)
    if n_train > 0:
        articles, left = [], n_train
        for article in data["data"]:
            paragraphs = []
            for paragraph in article["paragraphs"]:
                if left <= 0:
                    break
                qas = paragraph["qas"][:left]
                left -= len(qas)
                paragraphs.append(dict(paragraph, qas=qas))
            if paragraphs:
                articles.append(dict(article, paragraphs=paragraphs))
            if left <= 0:
                break
        data = dict(data, data=articles)
    with open(os.path.join(out, "train.json"), "w", encoding="utf-8") as f:
        json.dump(data, f)
    shutil.copyfile(source["dev"], os.path.join(out, "dev.json"))


WRITERS = {"sst": write_sst, "chunk": write_chunk, "squadv1": write_squad}


def prepare_rows(work: str, task: str, n_train: int) -> str:
    """<work>/rows_<task>_<n>/ holding finetuning_data/<task>/ (our layout, the peer's files)."""
    data_dir = os.path.join(work, f"rows_{task}_{n_train}")
    task_dir = os.path.join(data_dir, "finetuning_data", task)
    if not os.path.isdir(task_dir):
        os.makedirs(task_dir)
        WRITERS[task](SOURCES[task], task_dir, n_train)
    return data_dir


# ---------------------------------------------------------------------------------------------
# Ours.

def our_hparams(task: str, dtype: str, args: argparse.Namespace, extra: dict) -> dict:
    hparams = dict(task_names=[task], model_size="small", init_checkpoint="",
                   vocab_file=VOCAB_FILE, num_train_epochs=float(args.epochs),
                   train_batch_size=args.batch, learning_rate=args.lr,
                   max_seq_length=args.squad_max_len if task == "squadv1" else args.max_len,
                   compute_dtype=dtype)
    if args.n_dev > 0:
        hparams["max_eval_examples"] = args.n_dev
    hparams.update(extra)
    return hparams


def log_phases(log_text: str, started: float, ended: float, task: str) -> dict:
    """Seconds of each phase of our run, from its log lines' timestamps (None when a line that
    bounds a phase is missing: the log's wording changed or the run failed)."""
    marks: list[tuple[float, str]] = []
    for line in log_text.splitlines():
        m = LOG_LINE.match(line)
        if m:
            stamp = datetime.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
            marks.append((stamp, m.group(2)))

    def first(pattern: str, after: float = 0.0) -> float | None:
        rx = re.compile(pattern)
        return next((t for t, text in marks if t >= after and rx.search(text)), None)

    def last(pattern: str) -> float | None:
        rx = re.compile(pattern)
        return next((t for t, text in reversed(marks) if rx.search(text)), None)

    first_log = marks[0][0] if marks else None
    plan = first(r"training \d+ steps")
    step1 = first(r"step 1/\d+")
    last_step = last(r"epoch \d+/\d+ step (\d+)/\1\b")
    dev_featurized = first(rf"{task} dev: \d+ examples", after=last_step or 0.0)
    scored = last(rf"trial \d+ {task} dev: ")
    points = [("startup_s", started, first_log), ("prepare_s", first_log, plan),
              ("first_step_s", plan, step1), ("other_steps_s", step1, last_step),
              ("after_train_s", last_step, dev_featurized), ("eval_s", dev_featurized, scored),
              ("exit_s", scored, ended)]
    return {name: (round(b - a, 2) if a is not None and b is not None else None)
            for name, a, b in points}


def run_ours(work: str, data_dir: str, task: str, dtype: str, variant: str, extra: dict,
             args: argparse.Namespace, tag: str, root: str = common.ROOT) -> dict:
    """One run of `root`/run_finetuning.py (root: this checkout, or --baseline-root's)."""
    model_name = f"{tag}_{variant}"
    hparams = our_hparams(task, dtype, args, extra)
    command = [sys.executable, os.path.join(root, "run_finetuning.py"), "--data-dir",
               data_dir, "--model-name", model_name, "--hparams", json.dumps(hparams)]
    log_path = os.path.join(work, f"{model_name}.log")
    started = time.time()
    with open(log_path, "w", encoding="utf-8") as log:
        proc = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, cwd=root,
                              timeout=args.timeout, check=False)
    ended = time.time()
    with open(log_path, encoding="utf-8") as f:
        log_text = f.read()
    if proc.returncode != 0:
        raise RuntimeError(f"ours failed (exit {proc.returncode}): {' '.join(command)}\n"
                           f"{log_text[-3000:]}")
    results_json = os.path.join(data_dir, "models", model_name, "results",
                                f"{task}_results.json")
    with open(results_json, encoding="utf-8") as f:
        median = json.load(f)["median"]
    padded = PADDED_LINE.findall(log_text)
    row = {"impl": "ours-tf", "variant": variant, "wall_s": round(ended - started, 1),
           "dev_score": round(median[task][SCORE[task][0]], 2),
           "mean_padded_len": float(padded[-1]) if padded else float(hparams["max_seq_length"]),
           "padded_len_source": "log" if padded else "max_seq_length",
           "phases": log_phases(log_text, started, ended, task), "hparams": hparams}
    if not args.keep_work:  # the checkpoint and caches of a finished run are not needed again
        shutil.rmtree(os.path.join(data_dir, "models", model_name), ignore_errors=True)
    return row


# ---------------------------------------------------------------------------------------------
# The peer.

def run_peer(data_dir: str, task: str, n_train: int, dtype: str, args: argparse.Namespace) -> dict:
    task_dir = os.path.join(data_dir, "finetuning_data", task)
    if task == "sst":
        flags = ["--glue-dir", task_dir]
    else:
        flags = ["--train", os.path.join(task_dir, "train.txt"),
                 "--dev", os.path.join(task_dir, "dev.txt")]
    flags += ["--vocab", VOCAB_FILE, "--n-train", n_train, "--epochs", args.epochs,
              "--batch", args.batch, "--max-len", args.max_len, "--lr", args.lr,
              *PEER_DTYPE_FLAGS[dtype]]
    started = time.time()
    peer = common.run_peer(PEER_SCRIPTS[task], flags, timeout=args.timeout)
    wall = time.time() - started
    return {"impl": "peer-hf-pytorch", "variant": "standard", "wall_s": round(wall, 1),
            "dev_score": peer[SCORE[task][1]], "mean_padded_len": peer["mean_padded_len"],
            "padded_len_source": "peer", "phases": {
                "startup_s": peer["start_s"], "train_s": peer["train_s"],
                "eval_s": peer["eval_s"], "inner_wall_s": peer["wall_s"]}}


# ---------------------------------------------------------------------------------------------
# The matrix.

def parse_variants(texts: list[str] | None) -> list[tuple[str, dict]]:
    """--our-hparams values, `NAME=JSON` or `JSON` (named v1, v2, ...) -> [(name, hparams)];
    ValueError names a bad one."""
    if not texts:
        return [("default", {})]
    variants = []
    for i, text in enumerate(texts, 1):
        name, sep, body = text.partition("=")
        if not sep or name.strip().startswith("{"):
            name, body = f"v{i}", text
        try:
            values = json.loads(body)
        except json.JSONDecodeError as e:
            raise ValueError(f"--our-hparams {text!r}: not JSON ({e})") from None
        if not isinstance(values, dict):
            raise ValueError(f"--our-hparams {text!r}: a JSON object of hparams is needed")
        variants.append((name.strip(), values))
    if len({n for n, _ in variants}) != len(variants):
        raise ValueError("--our-hparams: variant names must differ")
    return variants


def summarize(runs: list[dict], first_variant: str) -> list[dict]:
    """One row per (task, rows, dtype, impl, variant): medians over rounds and the ratios."""
    groups: dict[tuple, list[dict]] = {}
    for run in runs:
        key = (run["task"], run["n_train"], run["dtype"], run["impl"], run["variant"])
        groups.setdefault(key, []).append(run)
    rows = []
    for (task, n_train, dtype, impl, variant), group in groups.items():
        def median(key, within=None):
            values = [(g[within] if within else g).get(key) for g in group]
            values = [v for v in values if v is not None]
            return round(statistics.median(values), 2) if values else None

        row = {"task": task, "n_train": n_train, "dtype": dtype, "impl": impl,
               "variant": variant, "rounds": len(group), "wall_s": median("wall_s"),
               "wall_per_round": [g["wall_s"] for g in group],
               "dev_score": median("dev_score"), "mean_padded_len": median("mean_padded_len"),
               "phases": {k: median(k, "phases") for k in group[0]["phases"]},
               "load_before": [g["load_before"] for g in group]}
        same_job = [r for r in runs if (r["task"], r["n_train"], r["dtype"]) ==
                    (task, n_train, dtype)]
        peer = {r["round"]: r["wall_s"] for r in same_job if r["impl"] != "ours-tf"}
        first = {r["round"]: r["wall_s"] for r in same_job
                 if r["impl"] == "ours-tf" and r["variant"] == first_variant}
        if impl == "ours-tf":
            if peer:
                row["peer_wall_s"] = round(statistics.median(peer.values()), 2)
                row["x_peer"] = round(row["peer_wall_s"] / row["wall_s"], 3)
                row["x_peer_per_round"] = [round(peer[g["round"]] / g["wall_s"], 3)
                                           for g in group if g["round"] in peer]
            if variant != first_variant and first:
                row["x_first"] = round(statistics.median(first.values()) / row["wall_s"], 3)
        rows.append(row)
    return rows


def table(rows: list[dict]) -> str:
    shown = []
    for row in rows:
        ph = row["phases"]
        shown.append(dict(
            row, job=f"{row['task']} {row['n_train']} rows", impl_v=(
                row["impl"] if row["variant"] in ("default", "standard")
                else f"{row['impl']} {row['variant']}"),
            per_round=", ".join(f"{w:.1f}" for w in row["wall_per_round"]),
            fixed=(" / ".join("-" if ph.get(k) is None else f"{ph[k]:.1f}" for k in (
                "startup_s", "prepare_s", "first_step_s", "after_train_s", "eval_s", "exit_s"))
                if row["impl"] == "ours-tf" else
                " / ".join("-" if ph.get(k) is None else f"{ph[k]:.1f}"
                           for k in ("startup_s", "train_s", "eval_s"))),
            loads=", ".join(f"{x:.1f}" for x in row["load_before"])))
    return common.markdown_table(shown, [
        ("job", "job"), ("dtype", "dtype"), ("impl_v", "impl"), ("wall_s", "wall s (median)"),
        ("per_round", "wall s per round"), ("x_peer", "speed x peer"),
        ("x_first", "speed x first variant"), ("dev_score", "dev score"),
        ("mean_padded_len", "mean padded len"),
        ("fixed", "ours: start-up / prepare / first step / after training / eval / exit s; "
                  "peer: start-up / train / eval s"),
        ("loads", "load before")])


def main() -> None:
    parser = _make_parser()
    args = parser.parse_args()
    tasks, dtypes, sizes, variants, roots = _checked_choices(parser, args)
    common.PEER_PYTHON = args.peer_python
    use_peer = common.use_peer(args.no_peer)

    machine = common.machine_summary()
    print(f"# machine: {machine['nproc']} cores, {machine['cpu']}, flags "
          f"{' '.join(machine['cpu_flags'])}; {machine['date']}; load "
          f"{common.load_average():.2f}", flush=True)
    work = args.work or tempfile.mkdtemp(prefix="finetune_e2e_")
    os.makedirs(work, exist_ok=True)
    runs = []
    try:
        for task in tasks:
            for n_train in sizes:
                data_dir = prepare_rows(work, task, n_train)
                for r in range(1, args.rounds + 1):
                    for dtype in dtypes:
                        runs += _run_job(args, work, data_dir, dict(
                            task=task, n_train=n_train, dtype=dtype, round=r), variants, roots,
                            use_peer)
    finally:
        rows = summarize(runs, variants[0][0]) if runs else []
        _write_result(args, machine, rows, runs)
        if not args.keep_work and args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    print()
    print(f"Fine-tuning end to end (process start to dev score), ELECTRA-Small from random "
          f"weights, {args.epochs} epoch, batch {args.batch}, max length {args.max_len}, lr "
          f"{args.lr}; speed x peer = the peer's wall time / ours (> 1: ours faster)")
    print(table(rows))
    print(f"\n# written {args.output}; machine {json.dumps(machine)}; load at end "
          f"{common.load_average():.2f}")


def _make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n", 1)[1])
    parser.add_argument("--tasks", default="sst,chunk",
                        help="comma-separated: sst, chunk (against the peer), squadv1 (ours only)")
    parser.add_argument("--n-train", default="2000,8000",
                        help="comma-separated training row counts (0: all rows)")
    parser.add_argument("--n-dev", type=int, default=0,
                        help="ours: max_eval_examples (0: the whole dev set; the peer always "
                             "scores the whole dev set, so use it for squadv1 only)")
    parser.add_argument("--dtypes", default="float32,bfloat16")
    parser.add_argument("--rounds", type=int, default=1, help="alternations ours / peer")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--max-len", type=int, default=128)
    parser.add_argument("--squad-max-len", type=int, default=384)
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--our-hparams", action="append", metavar="[NAME=]JSON",
                        help="extra hparams for our runs (e.g. a padding mode); repeat for "
                             "several variants, each measured in every round")
    parser.add_argument("--baseline-root", default=None, metavar="DIR",
                        help="also run ours from another checkout of the project (e.g. `git "
                             "archive` of an older commit), first in every round: the "
                             "`baseline` variant, the reference of `x first`")
    parser.add_argument("--no-peer", action="store_true")
    parser.add_argument("--peer-python", default=common.PEER_PYTHON,
                        help="the peer venv's python (../shared/peers/setup.sh VENV)")
    parser.add_argument("--idle-load", type=float, default=1.5)
    parser.add_argument("--max-wait", type=float, default=120.0,
                        help="seconds to wait for the load to fall below --idle-load before "
                             "each run (0: record the load and go on, e.g. on a busy machine)")
    parser.add_argument("--timeout", type=float, default=7200.0, help="seconds per process")
    parser.add_argument("--work", default=None, help="work directory (default: a new temp dir)")
    parser.add_argument("--keep-work", action="store_true",
                        help="keep the work directory, models and logs")
    parser.add_argument("--output", default=os.path.join(common.ROOT, "benchmarks", "results",
                                                         "finetune_e2e.json"))
    return parser


def _checked_choices(parser: argparse.ArgumentParser, args: argparse.Namespace) -> tuple:
    """(tasks, dtypes, training sizes, variants, each variant's checkout) from the flags;
    parser.error names a bad flag."""
    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    unknown = [t for t in tasks if t not in SOURCES]
    if unknown or not tasks:
        parser.error(f"--tasks: {', '.join(unknown) or 'none'}: choose from {', '.join(SOURCES)}")
    dtypes = [d.strip() for d in args.dtypes.split(",") if d.strip()]
    if not dtypes or any(d not in PEER_DTYPE_FLAGS for d in dtypes):
        parser.error(f"--dtypes {args.dtypes!r}: a comma-separated list of float32, bfloat16")
    try:
        sizes = [int(n) for n in args.n_train.split(",") if n.strip()]
    except ValueError:
        parser.error(f"--n-train {args.n_train!r}: comma-separated integers")
    try:
        variants = parse_variants(args.our_hparams)
    except ValueError as e:
        parser.error(str(e))
    roots = {name: common.ROOT for name, _ in variants}
    if args.baseline_root:
        if not os.path.isfile(os.path.join(args.baseline_root, "run_finetuning.py")):
            parser.error(f"--baseline-root {args.baseline_root}: no run_finetuning.py there")
        if "baseline" in roots:
            parser.error("--our-hparams: the name baseline is --baseline-root's")
        variants.insert(0, ("baseline", dict(variants[0][1])))
        roots["baseline"] = os.path.abspath(args.baseline_root)
    return tasks, dtypes, sizes, variants, roots


def _run_job(args: argparse.Namespace, work: str, data_dir: str, job: dict, variants: list,
             roots: dict, use_peer: bool) -> list[dict]:
    """One task, size, dtype and round: each of our variants, then the peer."""
    tag = f"{job['task']}_{job['n_train']}_{job['dtype']}_r{job['round']}"
    sides = [("ours", v) for v in variants]
    if use_peer and job["task"] in PEER_SCRIPTS:
        sides.append(("peer", None))
    runs = []
    for side, variant in sides:
        load = common.wait_for_idle(args.idle_load, args.max_wait, f"({tag} {side})")
        if side == "ours":
            run = run_ours(work, data_dir, job["task"], job["dtype"], variant[0], variant[1],
                           args, tag, roots[variant[0]])
        else:
            run = run_peer(data_dir, job["task"], job["n_train"], job["dtype"], args)
        run.update(job, load_before=load)
        runs.append(run)
        print(f"# {tag} {run['impl']} {run['variant']}: {run['wall_s']:.1f} s,"
              f" dev {run['dev_score']}, padded {run['mean_padded_len']}, "
              f"phases {run['phases']}", flush=True)
    return runs


def _write_result(args: argparse.Namespace, machine: dict, rows: list, runs: list) -> None:
    result = {"benchmark": "finetune_e2e", "machine": machine,
              "load_at_end": round(common.load_average(), 2),
              "args": vars(args),
              "rows": rows, "runs": runs}
    os.makedirs(os.path.dirname(args.output), exist_ok=True)
    with open(args.output + ".tmp", "w", encoding="utf-8") as f:
        json.dump(result, f, indent=2)
    os.replace(args.output + ".tmp", args.output)


if __name__ == "__main__":
    main()
