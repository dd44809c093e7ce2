"""Shared recipe and runner for the CPU-scale experiments (experiments/exp*.py).

Each experiment pre-trains a few tiny models on a slice of the shared corpus and fine-tunes each
on SST-2 and STS-B (median of 3 seeds). Runs go through the real command-line scripts
(run_pretraining.py, run_finetuning.py) as subprocesses, into a work directory outside the
repository. A model whose final checkpoint and results already exist is not re-run, so the
experiments share models with identical settings (e.g. the ELECTRA baseline).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Callable

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from util import io_utils  # noqa: E402

PYTHON = sys.executable
# The test data (CONTRIBUTING.md, "Test data"): ELECTRA_SHARED_DATA, or shared/data beside the
# repository's directory, as the tests read it.
SHARED_DATA = os.environ.get("ELECTRA_SHARED_DATA",
                             os.path.join(os.path.dirname(REPO), "shared", "data"))
CORPUS = os.path.join(SHARED_DATA, "pretrain_corpus")
GLUE = os.path.join(SHARED_DATA, "glue", "{task}")
CORPUS_FILES = [f"enwiki_wiki_{i:02d}.txt" for i in range(6)]  # ~5.2 MB slice
VOCAB_SIZE = 4000
SEQ = 64
PRETRAIN_STEPS = 600

# The tiny recipe: CALIBRATION.md's model with a small SentencePiece vocab, seq 64 and the
# corrected optimizer (bias correction, decay after a short warm-up).
PRETRAIN_BASE = {
    "vocab_size": VOCAB_SIZE, "max_seq_length": SEQ, "do_lower_case": False,
    "model_hparam_overrides": {"hidden_size": 128, "num_hidden_layers": 2,
                               "num_attention_heads": 2, "intermediate_size": 512},
    "embedding_size": 64, "train_batch_size": 32, "learning_rate": 1e-3,
    "num_warmup_steps": 50, "num_train_steps": PRETRAIN_STEPS, "adam_bias_correction": True,
    "lr_decay_after_warmup": True, "save_checkpoints_steps": 100000,
    "iterations_per_loop": 100, "do_eval": True, "num_eval_steps": 4, "eval_batch_size": 64,
    "generator_hidden_size": 0.25,
}
# Pre-training arms, as hparams over a recipe: the paper's ELECTRA (embedding sharing, ES), BERT
# (masked LM only), gradient-disentangled embedding sharing (DeBERTa-v3), and the remedy for a
# generator too strong for its discriminator that EXPERIMENTS.md section 5 found best (sampling
# temperature 2). Names without "_": model names are <arm>_<size>_b<budget>_s<seed>.
ARMS = {
    "electra": {},
    "bert": {"electra_objective": False},
    "gdes": {"embedding_sharing": "gdes"},
    "temp2": {"temperature": 2.0},
}
# Fine-tuning: subsets so that one model's 2 tasks x 3 seeds take ~2 minutes.
FINETUNE_BASE = {
    "vocab_size": VOCAB_SIZE, "do_lower_case": False, "max_seq_length": SEQ,
    "raw_data_dir": GLUE, "learning_rate": 1e-3, "adam_bias_correction": True,
    "lr_decay_after_warmup": True, "layerwise_lr_decay": 0.8, "train_batch_size": 32,
    "num_trials": 3, "keep_all_models": False,
}
TASKS = {
    "sst": {"max_train_examples": 2000, "num_train_epochs": 2.0, "metric": "accuracy"},
    "sts": {"max_train_examples": 1500, "num_train_epochs": 2.0, "metric": "spearman"},
}


def parse_args(description: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--work-dir", default=os.path.join(REPO, "..", "electra_exp_work"),
                        help="data, models and logs go here (outside the repository)")
    parser.add_argument("--out-dir", default=os.path.join(REPO, "experiments", "results"),
                        help="where the results table (markdown + JSON) is written")
    parser.add_argument("--steps", type=int, default=PRETRAIN_STEPS,
                        help="pre-training steps of the reference ELECTRA model")
    return parser.parse_args()


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def _run(cmd: list[str], log_path: str) -> float:
    start = time.time()
    os.makedirs(os.path.dirname(log_path), exist_ok=True)
    with open(log_path, "a") as f:
        f.write(f"\n$ {' '.join(cmd)}\n")
        f.flush()
        proc = subprocess.run(cmd, cwd=REPO, stdout=f, stderr=subprocess.STDOUT)
    if proc.returncode:
        raise RuntimeError(f"command failed (exit {proc.returncode}); see {log_path}")
    return time.time() - start


def ensure_data(work: str) -> str:
    """Builds the SentencePiece vocab and tfrecords once; returns the data dir."""
    data = os.path.join(work, "data")
    records = os.path.join(data, "pretrain_tfrecords")
    if not os.path.exists(os.path.join(records, "metadata.json")):
        corpus = os.path.join(work, "corpus")
        os.makedirs(corpus, exist_ok=True)
        for name in CORPUS_FILES:
            link = os.path.join(corpus, name)
            if not os.path.exists(link):
                os.symlink(os.path.join(CORPUS, name), link)
        _run([PYTHON, "build_pretraining_dataset.py", "--corpus-dir", corpus,
              "--vocab-size", str(VOCAB_SIZE), "--output-dir", records, "--max-seq-length",
              str(SEQ), "--num-processes", "2", "--eval-fraction", "0.02", "--no-progress",
              "--official-truncation"],  # the rules the results below were measured with
             os.path.join(work, "logs", "build_data.log"))
    return data


def spm_model(data: str) -> str:
    return os.path.join(data, "pretrain_tfrecords", "spm.model")


def pretrain_hparams(data: str, overrides: dict) -> dict:
    hparams = dict(PRETRAIN_BASE, vocab_file=spm_model(data))
    hparams.update(overrides)
    return hparams


def pretrain(work: str, name: str, overrides: dict) -> dict:
    """Pre-trains models/<name> (skipped if done); returns its eval metrics and wall time."""
    data = ensure_data(work)
    hparams = pretrain_hparams(data, overrides)
    model_dir = os.path.join(data, "models", name)
    done = os.path.join(model_dir, "results", "unsup_results.json")
    timing = os.path.join(model_dir, "results", "pretrain_seconds.json")
    if os.path.exists(done) and io_utils.read_json(done).get("global_step") == \
            hparams["num_train_steps"]:
        log(f"pretrain {name}: done already")
    else:
        log(f"pretrain {name}: {json.dumps(overrides)}")
        seconds = _run([PYTHON, "run_pretraining.py", "--data-dir", data, "--model-name", name,
                        "--hparams", json.dumps(hparams)],
                       os.path.join(work, "logs", f"pretrain_{name}.log"))
        io_utils.write_json(timing, {"seconds": seconds})
    metrics = io_utils.read_json(done)
    if os.path.exists(timing):
        metrics["pretrain_seconds"] = io_utils.read_json(timing)["seconds"]
    return metrics


def finetune(work: str, name: str, task: str, random_init: bool = False) -> dict:
    """Fine-tunes models/<name> on `task`, 3 seeds; returns {"median", "scores", "seconds"}."""
    data = ensure_data(work)
    spec = TASKS[task]
    hparams = dict(FINETUNE_BASE, task_names=[task], vocab_file=spm_model(data),
                   max_train_examples=spec["max_train_examples"],
                   num_train_epochs=spec["num_train_epochs"])
    if random_init:
        hparams.update(init_checkpoint="", debug=False,
                       model_hparam_overrides=PRETRAIN_BASE["model_hparam_overrides"],
                       embedding_size=PRETRAIN_BASE["embedding_size"])
    results = os.path.join(data, "models", name, "results", f"{task}_results.json")
    if not (os.path.exists(results) and io_utils.read_json(results).get("num_trials") == 3):
        log(f"finetune {name} on {task}")
        seconds = _run([PYTHON, "run_finetuning.py", "--data-dir", data, "--model-name", name,
                        "--hparams", json.dumps(hparams)],
                       os.path.join(work, "logs", f"finetune_{name}_{task}.log"))
        out = io_utils.read_json(results)
        out["seconds"] = seconds
        io_utils.write_json(results, out)
    out = io_utils.read_json(results)
    metric = spec["metric"]
    scores = [t["results"][task][metric] for t in out["trials"]]
    return {"median": statistics.median(scores), "scores": scores, "metric": metric,
            "seconds": out.get("seconds")}


def evaluate_model(work: str, name: str, overrides: dict | None,
                   random_init: bool = False) -> dict:
    """Pre-trains (unless random_init) and fine-tunes on every task; one results row."""
    row = {"name": name, "hparams": overrides}
    if not random_init:
        row["pretrain"] = pretrain(work, name, overrides)
    row["tasks"] = {task: finetune(work, name, task, random_init) for task in TASKS}
    row["glue_mean"] = statistics.mean(r["median"] for r in row["tasks"].values())
    return row


def write_table(out_dir: str, stem: str, title: str, rows: list[dict], columns: list[str],
                notes: str = "") -> str:
    """Writes <stem>.json (everything) and <stem>.md (a table of `columns` per row)."""
    os.makedirs(out_dir, exist_ok=True)
    io_utils.write_json(os.path.join(out_dir, stem + ".json"), {"title": title, "rows": rows})
    lines = [f"# {title}", "", notes, "", "| " + " | ".join(columns) + " |",
             "|" + "---|" * len(columns)]
    for row in rows:
        lines.append("| " + " | ".join(str(row["cells"].get(c, "")) for c in columns) + " |")
    path = os.path.join(out_dir, stem + ".md")
    io_utils.write_text(path, "\n".join(lines) + "\n")
    return path


def task_cells(row: dict) -> dict:
    cells = {}
    for task, r in row["tasks"].items():
        scores = ", ".join(f"{s:.1f}" for s in r["scores"])
        cells[f"{task} {r['metric']} (median [seeds])"] = f"{r['median']:.1f} [{scores}]"
    return cells


def electra_reference(steps: int) -> tuple[str, dict]:
    """The ELECTRA baseline every experiment shares (same name, same settings)."""
    return f"electra_{steps}", {"num_train_steps": steps, "num_warmup_steps": min(50, steps // 10)}


def run_rows(args, models: list[tuple[str, str, dict]]) -> list[dict]:
    """Evaluates (label, model name, overrides) in order; returns rows with `label`."""
    rows = []
    for label, name, overrides in models:
        rows.append(dict(evaluate_model(args.work_dir, name, overrides), label=label))
    return rows


def run_experiment(doc: str, stem: str, title: str, label_column: str,
                   models: Callable[[argparse.Namespace], list[tuple[str, str, dict]]],
                   notes: str,
                   run: Callable[[argparse.Namespace, list], list[dict]] = run_rows) -> str:
    """The main of an experiment that compares labelled models on the standard cells.

    doc: the script's docstring (its first line describes the command line). models(args):
    (label, model name, overrides) in table order, after any preparation they need. run(args,
    models): their rows in table order. notes: the table's notes, a str.format template that
    may use {steps} (--steps), {half} (steps // 2) and {seconds} (wall time from the start).
    Writes <out_dir>/<stem>.md and .json; returns the .md path.
    """
    args = parse_args(doc.splitlines()[0])
    start = time.time()
    rows = run(args, models(args))
    for row in rows:
        row["cells"] = {label_column: row["label"], **standard_cells(row)}
    path = write_table(args.out_dir, stem, title, rows, list(rows[0]["cells"]),
                       notes.format(steps=args.steps, half=args.steps // 2,
                                    seconds=time.time() - start))
    log(f"wrote {path}")
    return path


def standard_cells(row: dict) -> dict:
    pre = row.get("pretrain", {})
    return {"pre-train s": f"{pre.get('pretrain_seconds', 0):.0f}",
            "MLM acc (eval)": f"{pre.get('masked_lm_accuracy', float('nan')):.3f}",
            "disc AUC (eval)": (f"{pre['disc_auc']:.3f}" if "disc_auc" in pre else "-"),
            **task_cells(row), "mean": f"{row['glue_mean']:.1f}"}


def wait_for_results(work: str, name: str, timeout: float = 3600.0) -> None:
    """Waits until models/<name> has fine-tuning results of every task (or a timeout, after
    which the caller trains it itself)."""
    data = os.path.join(work, "data")
    paths = [os.path.join(data, "models", name, "results", f"{task}_results.json")
             for task in TASKS]
    deadline = time.time() + timeout
    def done(path):
        return os.path.exists(path) and io_utils.read_json(path).get("num_trials") == 3

    while time.time() < deadline and not all(done(p) for p in paths):
        time.sleep(20)
