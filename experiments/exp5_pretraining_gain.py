"""Experiment 5: what pre-training buys at this machine's capacity (EXPERIMENTS.md section 6).

The whole 54 MB shared corpus with an 8000-piece SentencePiece vocabulary at seq 128; ELECTRA
(paper recipe: generator 1/4 width, temperature 1) and BERT (masked LM only, same encoder) at
equal pre-training FLOPs and three budgets; random initialisation as the floor; 3 pre-training
seeds at the largest budget. Measures: frozen-feature probes (tools/probe.py: POS and chunk tags
of CoNLL-2000, SST-2 sentences), and fine-tuning (experiments/finetune_grid.py). Every run
resumes from its checkpoints, so the script can be stopped and restarted at any time.

    python experiments/exp5_pretraining_gain.py pretrain [--work-dir DIR] [--only NAME ...]
    python experiments/exp5_pretraining_gain.py probe    [--work-dir DIR]
    python experiments/exp5_pretraining_gain.py report   [--work-dir DIR]

`pretrain` runs the models in the order that gives a usable comparison soonest (largest budget,
seed 0 of both methods first). Never run inside CI.

Further arms (`--arms`, experiments/common.py ARMS) beside ES and BERT: `gdes`
(gradient-disentangled embedding sharing) and `temp2` (sampling temperature 2, section 5's best
remedy for a generator too strong for its discriminator), each at the largest budget with every
pre-training seed and ELECTRA's FLOPs, compared with ELECTRA in the report. Pass the same
`--arms` to every stage:

    python experiments/exp5_pretraining_gain.py pretrain --arms gdes temp2
    python experiments/exp5_pretraining_gain.py report --arms gdes temp2 --report-name NAME

`--report-name` writes the report to its own files, so a study's work dir does not overwrite
section 6's figures in exp5_pretraining_gain.*.
"""
import argparse
import json
import os
import shutil
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from configure_pretraining import PretrainingConfig  # noqa: E402
from benchmarks.common import machine_summary  # noqa: E402
from experiments import common  # noqa: E402
from experiments.flops import pretrain_step_flops  # noqa: E402
from util import io_utils  # noqa: E402

VOCAB_SIZE = 8000
SEQ = 128
# ELECTRA steps of the three budgets (batch 32); BERT gets the same FLOPs.
ELECTRA_STEPS = (500, 1000, 2000)
SEEDS = (0, 1, 2)  # pre-training seeds at the largest budget

# Candidate encoders for "the tiny size that learns best per CPU-minute". The generator is a
# quarter of the width (heads = hidden / 64, at least 1), as the paper's small model.
SIZES = {
    "h128_l3": {"model_hparam_overrides": {"hidden_size": 128, "num_hidden_layers": 3,
                                           "num_attention_heads": 2, "intermediate_size": 512},
                "embedding_size": 64},
    "h256_l4": {"model_hparam_overrides": {"hidden_size": 256, "num_hidden_layers": 4,
                                           "num_attention_heads": 4, "intermediate_size": 1024},
                "embedding_size": 128},
}
SIZE = "h128_l3"  # chosen by the pilot (EXPERIMENTS.md section 6)

PRETRAIN_BASE = {
    "vocab_size": VOCAB_SIZE, "max_seq_length": SEQ, "train_batch_size": 32,
    "learning_rate": 1e-3, "adam_bias_correction": True, "lr_decay_after_warmup": True,
    "generator_hidden_size": 0.25, "temperature": 1.0, "compute_dtype": "bfloat16",
    "save_checkpoints_steps": 250, "iterations_per_loop": 50, "keep_checkpoint_max": 2,
    "do_eval": True, "num_eval_steps": 20, "eval_batch_size": 32,
}


def data_dir(work: str) -> str:
    return os.path.join(work, "data")


def ensure_data(work: str) -> str:
    """The whole shared corpus -> 8000-piece SentencePiece vocab + seq-128 tfrecords (once)."""
    data = data_dir(work)
    records = os.path.join(data, "pretrain_tfrecords")
    if not os.path.exists(os.path.join(records, "metadata.json")):
        common._run([common.PYTHON, "build_pretraining_dataset.py", "--corpus-dir", common.CORPUS,
                     "--vocab-size", str(VOCAB_SIZE), "--output-dir", records,
                     "--max-seq-length", str(SEQ), "--num-processes", "2", "--no-progress",
                     "--official-truncation"],  # the rules its results were measured with
                    os.path.join(work, "logs", "build_data.log"))
    return data


def spm_model(work: str) -> str:
    return os.path.join(data_dir(work), "pretrain_tfrecords", "spm.model")


def hparams(work: str, method: str, steps: int, seed: int, size: str = SIZE) -> dict:
    h = dict(PRETRAIN_BASE, **SIZES[size], vocab_file=spm_model(work), seed=seed,
             num_train_steps=steps, num_warmup_steps=max(10, steps // 10))
    h.update(common.ARMS[method])
    return h


def step_flops(work: str, method: str, size: str = SIZE) -> int:
    config = PretrainingConfig.from_hparams("flops", data_dir(work),
                                            hparams(work, method, 100, 0, size))
    return pretrain_step_flops(config)["total"]


def plan(work: str, arms: tuple = ()) -> list[dict]:
    """Every pre-training run of the study, in the order they are run: ELECTRA and BERT, then
    each of `arms` (common.ARMS) at the largest budget with every seed."""
    flops = {method: step_flops(work, method) for method in ("electra", "bert", *arms)}
    electra = flops["electra"]
    runs = []

    def add(method, electra_steps, seed, size=SIZE):
        per_step = flops[method]
        if size != SIZE:
            per_step = step_flops(work, method, size)
        budget = electra_steps * electra  # FLOPs of ELECTRA at this budget, main size
        steps = electra_steps if (method == "electra" and size == SIZE) else \
            int(round(budget / per_step))
        name = f"{method}_{size}_b{electra_steps}_s{seed}"
        runs.append(dict(name=name, method=method, size=size, budget=electra_steps,
                         steps=steps, seed=seed, flops=steps * per_step))

    largest = ELECTRA_STEPS[-1]
    add("electra", largest, 0)
    add("electra", largest, 0, size="h256_l4")  # the size pilot, equal FLOPs
    add("bert", largest, 0)
    for budget in ELECTRA_STEPS[:-1]:
        add("electra", budget, 0)
        add("bert", budget, 0)
    for seed in SEEDS[1:]:
        add("electra", largest, seed)
        add("bert", largest, seed)
    for arm in arms:
        for seed in SEEDS:
            add(arm, largest, seed)
    return runs


LABELS = {"electra": "ELECTRA", "bert": "BERT", "gdes": "ELECTRA + GDES",
          "temp2": "ELECTRA, temperature 2", "random": "random"}
COLORS = {"electra": "tab:blue", "bert": "tab:orange", "gdes": "tab:green", "temp2": "tab:red"}


def reference_name(method: str) -> str:
    """The model of `method` the fine-tuning grid runs on: the largest budget, seed 0."""
    return random_name(0) if method == "random" else f"{method}_{SIZE}_b{ELECTRA_STEPS[-1]}_s0"


def model_dir(work: str, name: str) -> str:
    return os.path.join(data_dir(work), "models", name)


def pretrain(work: str, run: dict) -> None:
    done = os.path.join(model_dir(work, run["name"]), "results", "unsup_results.json")
    if os.path.exists(done) and io_utils.read_json(done).get("global_step") == run["steps"]:
        common.log(f"pretrain {run['name']}: done already")
        return
    common.log(f"pretrain {run['name']} ({run['steps']} steps, {run['flops']:.2e} FLOPs)")
    h = hparams(work, run["method"], run["steps"], run["seed"], run["size"])
    start = time.time()
    common._run([common.PYTHON, "run_pretraining.py", "--data-dir", data_dir(work),
                 "--model-name", run["name"], "--hparams", json.dumps(h)],
                os.path.join(work, "logs", f"pretrain_{run['name']}.log"))
    timing = os.path.join(model_dir(work, run["name"]), "results", "pretrain_seconds.json")
    previous = io_utils.read_json(timing)["seconds"] if os.path.exists(timing) else 0.0
    io_utils.write_json(timing, {"seconds": previous + time.time() - start,
                                 "load_after": os.getloadavg()[0]})


# -- measures -------------------------------------------------------------------------------------

SHARED = os.path.dirname(common.CORPUS)
CONLL = os.path.join(SHARED, "chunk", "train.txt")
SST = os.path.join(SHARED, "glue", "SST-2")
RANDOM_SEEDS = (0, 1, 2)  # random-initialisation encoders (the floor), one per seed
# Fine-tuning: the paper's Table 7 settings, except the learning rate and layer-wise decay, picked
# per method on a dev split carved from training data: each rate with Table 7's decay 0.8, then
# the best rate without decay (1.0). Rates above Table 7's because these runs are ~100 steps.
GRID_RATES = (1e-3, 3e-3, 1e-2)
FINETUNE_BASE = {
    "vocab_size": VOCAB_SIZE, "adam_bias_correction": True, "lr_decay_after_warmup": True,
    "train_batch_size": 32, "num_train_epochs": 3.0, "keep_all_models": False,
}
# name -> (task, sequence length, metric, train examples)
SETTINGS = {"chunk_1k": ("chunk", 128, "f1", 1000), "sst_2k": ("sst", 64, "accuracy", 2000),
            "chunk_full": ("chunk", 128, "f1", None)}
# Full-data chunking runs 7x the steps of chunk_1k (about 700) at minutes per run: its grid drops
# 1e-2, which the ~100-step runs needed for want of steps (and which collapsed without decay).
SETTING_RATES = {"chunk_full": (1e-3, 3e-3)}
# Settings fine-tuned only on the largest budget's seed-0 models (and the random encoders): their
# runs cost minutes each, so the spread reported is that of the fine-tuning seeds.
SEED0_ONLY = ("chunk_full",)


def grid_rates(setting: str) -> tuple:
    return SETTING_RATES.get(setting, GRID_RATES)


def _conll_sentences(path: str) -> list[str]:
    with open(path, encoding="utf-8") as f:
        return [block for block in f.read().split("\n\n") if block.strip()]


def task_dirs(work: str) -> dict:
    """Data dirs (raw_data_dir patterns) carved from the shared files, written once:

    chunk: the last 1000 train.txt sentences are the test set (CoNLL-2000 has no dev set and its
    test set is not here), the 500 before them the grid's dev split, the rest training data.
    sst: the official dev.tsv is the test set, training rows 2000-2999 the grid's dev split, the
    first 2000 rows the low-resource training set.
    """
    root = os.path.join(work, "finetune_data")
    dirs = {"final": os.path.join(root, "final", "{task}"),
            "grid": os.path.join(root, "grid", "{task}")}
    if os.path.exists(os.path.join(root, "done")):
        return dirs
    sentences = _conll_sentences(CONLL)
    test, dev, train = sentences[-1000:], sentences[-1500:-1000], sentences[:-1500]
    with open(os.path.join(SST, "train.tsv"), encoding="utf-8") as f:
        sst_rows = f.read().splitlines(keepends=True)
    with open(os.path.join(SST, "dev.tsv"), encoding="utf-8") as f:
        sst_dev = f.read()
    for split, chunk_dev, sst_heldout in (("final", test, sst_dev),
                                          ("grid", dev, "".join(sst_rows[:1] + sst_rows[2001:3001]))):
        chunk_dir = os.path.join(root, split, "chunk")
        sst_dir = os.path.join(root, split, "sst")
        io_utils.write_text(os.path.join(chunk_dir, "train.txt"), "\n\n".join(train) + "\n\n")
        io_utils.write_text(os.path.join(chunk_dir, "dev.txt"), "\n\n".join(chunk_dev) + "\n\n")
        io_utils.write_text(os.path.join(sst_dir, "train.tsv"), "".join(sst_rows[:2001]))
        io_utils.write_text(os.path.join(sst_dir, "dev.tsv"), sst_heldout)
    io_utils.write_text(os.path.join(root, "done"), "")
    return dirs


def random_name(seed: int) -> str:
    return f"random_{SIZE}_s{seed}"


def ensure_random_model(work: str, seed: int) -> str:
    """A model dir holding a randomly initialised encoder (0 pre-training steps) of SIZE."""
    name = random_name(seed)
    path = model_dir(work, name)
    if not os.path.exists(os.path.join(path, "bert_config.json")):
        from model import modeling
        from util import checkpoint
        h = hparams(work, "electra", 1, seed)
        config = PretrainingConfig.from_hparams(name, data_dir(work), h).bert_config()
        encoder = modeling.BertModel(config, "electra", seed=seed)
        checkpoint.save_tensors(os.path.join(path, "model.ckpt-0"),
                                {checkpoint.checkpoint_name(v): v for v in encoder.variables})
        io_utils.write_text(os.path.join(path, "bert_config.json"), config.to_json_string())
        io_utils.write_json(os.path.join(path, "pretrain_config.json"), h)
        shutil.copyfile(spm_model(work), os.path.join(path, "spm.model"))
    return name


def is_trained(work: str, name: str) -> bool:
    """Whether models/<name> is finished: a random encoder once written, a pre-trained one once
    its final eval is (a run still training has a config and checkpoints already)."""
    done = "bert_config.json" if name.startswith("random") else \
        os.path.join("results", "unsup_results.json")
    return os.path.exists(os.path.join(model_dir(work, name), done))


def probe(work: str, name: str) -> dict:
    """tools/probe.py on models/<name> (pre-trained column only; random models are rows too)."""
    out = os.path.join(model_dir(work, name), "results", "probe_results.json")
    if not os.path.exists(out):
        common.log(f"probe {name}")
        common._run([common.PYTHON, "tools/probe.py", "--model-dir", model_dir(work, name),
                     "--no-random", "--json", out], os.path.join(work, "logs", f"probe_{name}.log"))
    return io_utils.read_json(out)["pretrained"]


def finetune(work: str, name: str, setting: str, lr: float, decay: float, split: str,
             trials: int) -> list[float]:
    """Fine-tunes models/<name> with one (lr, decay); returns the score of every trial."""
    task, seq, metric, examples = SETTINGS[setting]
    tag = f"{setting}_{split}_lr{lr:g}_d{decay:g}"
    results = os.path.join(model_dir(work, name), "results", f"ft_{tag}.json")
    if not (os.path.exists(results) and io_utils.read_json(results).get("num_trials") == trials):
        common.log(f"finetune {name} {tag}")
        h = dict(FINETUNE_BASE, task_names=[task], vocab_file=spm_model(work),
                 raw_data_dir=task_dirs(work)[split], max_seq_length=seq, learning_rate=lr,
                 layerwise_lr_decay=decay, num_trials=trials, max_train_examples=examples,
                 model_dir=os.path.join(model_dir(work, name), "finetuning_models", tag),
                 # Features cached per data split: grid and final differ only in the files.
                 preprocessed_data_dir=os.path.join(model_dir(work, name), "finetuning_tfrecords",
                                                    split),
                 results_json=results, results_txt=results[:-5] + ".txt")
        common._run([common.PYTHON, "run_finetuning.py", "--data-dir", data_dir(work),
                     "--model-name", name, "--hparams", json.dumps(h)],
                    os.path.join(work, "logs", f"finetune_{name}_{tag}.log"))
    out = io_utils.read_json(results)
    return [t["results"][task][metric] for t in out["trials"]]


def best_grid_point(work: str, name: str, setting: str) -> tuple[float, float]:
    """The (lr, decay) with the best dev-split score for models/<name> (one seed each)."""
    scores = {(lr, 0.8): finetune(work, name, setting, lr, 0.8, "grid", 1)[0]
              for lr in grid_rates(setting)}
    best_rate = max(scores, key=scores.get)[0]
    scores[(best_rate, 1.0)] = finetune(work, name, setting, best_rate, 1.0, "grid", 1)[0]
    return max(scores, key=scores.get)


# -- report -------------------------------------------------------------------------------------

PROBES = [f"{t}/{f}" for t in ("pos", "chunk", "sst") for f in ("last", "mean")]
MEASURE_LABELS = {"pos/mean": "POS probe (mean of layers), acc %",
                  "chunk/mean": "chunk-tag probe (mean of layers), acc %",
                  "sst/mean": "SST-2 probe (mean-pooled, mean of layers), acc %",
                  "chunk_1k": "chunking, 1000 sentences, F1",
                  "sst_2k": "SST-2, 2000 examples, acc %",
                  "chunk_full": "chunking, 7436 sentences, F1"}


def collect(work: str, runs: list[dict]) -> list[dict]:
    """One row per measured model: its pre-training figures, probes and fine-tuning scores."""
    rows = []
    grids = {s: io_utils.read_json(os.path.join(work, f"grid_{s}.json"))
             for s in SETTINGS if os.path.exists(os.path.join(work, f"grid_{s}.json"))}
    entries = [dict(name=random_name(s), method="random", budget=0, steps=0, seed=s, flops=0)
               for s in RANDOM_SEEDS] + [r for r in runs if r["size"] == SIZE]
    for entry in entries:
        path = model_dir(work, entry["name"])
        results = os.path.join(path, "results")
        if not os.path.exists(os.path.join(path, "bert_config.json")):
            continue
        row = dict(entry, measures={}, finetune={})
        unsup = os.path.join(results, "unsup_results.json")
        if os.path.exists(unsup):
            row["pretrain_eval"] = io_utils.read_json(unsup)
        if entry["method"] != "random" and \
                row.get("pretrain_eval", {}).get("global_step") != entry["steps"]:
            continue  # still pre-training
        timing = os.path.join(results, "pretrain_seconds.json")
        if os.path.exists(timing):
            row["pretrain_seconds"] = io_utils.read_json(timing)["seconds"]
        probes = os.path.join(results, "probe_results.json")
        if os.path.exists(probes):
            row["measures"].update({k: 100 * v for k, v in
                                    io_utils.read_json(probes)["pretrained"].items()})
        for setting, grid in grids.items():
            if entry["method"] not in grid:
                continue
            lr, decay = grid[entry["method"]]
            task, _, metric, _ = SETTINGS[setting]
            tag = f"{setting}_final_lr{lr:g}_d{decay:g}"
            out = os.path.join(results, f"ft_{tag}.json")
            expected = 1 if entry["method"] == "random" else 3
            if os.path.exists(out) and io_utils.read_json(out).get("num_trials") == expected:
                scores = [t["results"][task][metric] for t in io_utils.read_json(out)["trials"]]
                row["finetune"][setting] = {"scores": scores, "lr": lr, "decay": decay}
                row["measures"][setting] = statistics.median(scores)
        rows.append(row)
    return rows


def verdicts(rows: list[dict], measures: list[str]) -> dict:
    """Per measure, at the largest budget: pre-trained vs random, ELECTRA vs BERT and each
    further arm vs ELECTRA, decided only when the seed ranges do not overlap."""
    largest = ELECTRA_STEPS[-1]

    def values(method, budget, measure):
        found = [r for r in rows if r["method"] == method and r["budget"] == budget
                 and measure in r["measures"]]
        if len(found) == 1 and measure in found[0]["finetune"]:
            # One pre-trained model (SEED0_ONLY settings): the spread of its fine-tuning seeds
            return list(found[0]["finetune"][measure]["scores"])
        if method == "random" and measure in SETTINGS:
            # One fine-tuning run per random encoder: seeds of both kinds
            return [s for r in found for s in r["finetune"][measure]["scores"]]
        return [r["measures"][measure] for r in found]

    def compare(a, b, name_a, name_b):
        if len(a) < 2 or len(b) < 2:
            return f"not measured with seeds on both sides ({len(a)} vs {len(b)} runs)"
        if min(a) > max(b):
            return f"{name_a} better: every seed above every {name_b} seed"
        if max(a) < min(b):
            return f"{name_b} better: every seed above every {name_a} seed"
        return "within the seed spread"

    arms = sorted({r["method"] for r in rows} - {"electra", "bert", "random"})
    out = {}
    for m in measures:
        electra, bert = values("electra", largest, m), values("bert", largest, m)
        floor = values("random", 0, m)
        out[m] = {"electra_vs_random": compare(electra, floor, "ELECTRA", "random init"),
                  "bert_vs_random": compare(bert, floor, "BERT", "random init"),
                  "electra_vs_bert": compare(electra, bert, "ELECTRA", "BERT")}
        for arm in arms:  # each further arm against the paper's ELECTRA
            out[m][f"{arm}_vs_electra"] = compare(values(arm, largest, m), electra,
                                                  LABELS[arm], "ELECTRA")
    return out


def verdict_line(measure: str, judged: dict) -> str:
    """One report line: every comparison of `verdicts` for `measure` ("a_vs_b" keys)."""
    parts = []
    for key, verdict in judged.items():
        a, b = key.split("_vs_")
        parts.append(f"{LABELS[a]} vs {LABELS[b]}: {verdict}")
    return f"- **{measure}**: " + "; ".join(parts)


def plot(rows: list[dict], measures: list[str], path: str) -> bool:
    """The measures against pre-training FLOPs as a PNG; False when matplotlib is not installed."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False

    cols = 3
    fig, axes = plt.subplots(-(-len(measures) // cols), cols,
                             figsize=(4.2 * cols, 3.3 * -(-len(measures) // cols)), squeeze=False)
    flops = [r["flops"] for r in rows if r["flops"]]
    for ax, m in zip(axes.flat, measures):
        floor = [r["measures"][m] for r in rows if r["method"] == "random" and m in r["measures"]]
        if floor:
            ax.axhspan(min(floor), max(floor), color="grey", alpha=0.25, lw=0)
            ax.axhline(statistics.mean(floor), color="grey", ls="--", lw=1,
                       label=f"random init ({len(floor)} seeds)")
        for method, color in COLORS.items():
            points = {}
            spreads = {}
            for r in rows:
                if r["method"] == method and m in r["measures"]:
                    points.setdefault(r["budget"], []).append((r["flops"], r["measures"][m]))
                    spreads.setdefault(r["budget"], []).extend(
                        r["finetune"].get(m, {}).get("scores", []))
            if not points:
                continue
            budgets = sorted(points)
            xs = [statistics.mean(f for f, _ in points[b]) for b in budgets]
            ys = [statistics.mean(v for _, v in points[b]) for b in budgets]
            ax.plot(xs, ys, "o-", color=color, label=LABELS[method])
            for b, x in zip(budgets, xs):
                vals = [v for _, v in points[b]]
                if len(vals) == 1 and len(spreads[b]) > 1:
                    vals = spreads[b]  # one model: the spread of its fine-tuning seeds
                if len(vals) > 1:
                    ax.errorbar([x], [statistics.mean(vals)],
                                yerr=[[statistics.mean(vals) - min(vals)],
                                      [max(vals) - statistics.mean(vals)]],
                                color=color, capsize=4, lw=1)
                    ax.scatter([x] * len(vals), vals, color=color, s=8, alpha=0.6)
        ax.set_xscale("log")
        ax.set_xlim(0.8 * min(flops), 1.25 * max(flops))  # the same axis in every panel
        ax.set_xlabel("pre-training FLOPs")
        ax.set_title(MEASURE_LABELS.get(m, m), fontsize=9)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(measures):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


def grid_table(work: str) -> dict[str, list[str]]:
    """The fine-tuning grid: dev-split score of every (lr, decay) tried, per setting and method
    (table rows)."""
    lines = {}
    for setting in SETTINGS:
        grid_file = os.path.join(work, f"grid_{setting}.json")
        if not os.path.exists(grid_file):
            continue
        chosen = io_utils.read_json(grid_file)
        task, _, metric, _ = SETTINGS[setting]
        for method in chosen:
            name = reference_name(method)
            cells = []
            points = [(r, 0.8) for r in grid_rates(setting)]
            best_rate = max(points, key=lambda p: _grid_score(work, name, setting, *p))[0]
            for lr, decay in points + [(best_rate, 1.0)]:
                score = _grid_score(work, name, setting, lr, decay)
                text = f"{score:.1f}" + (f" (lr {lr:g})" if decay == 1.0 else "")
                cells.append(f"**{text}**" if [lr, decay] == chosen[method] else text)
            lines.setdefault(setting, []).append(
                f"| {setting} | {method} | " + " | ".join(
                    f"lr {lr:g}, decay 0.8: {cell}" for lr, cell in zip(grid_rates(setting), cells))
                + f" | best lr, decay 1.0: {cells[-1]} |")
    return lines


def _grid_score(work: str, name: str, setting: str, lr: float, decay: float) -> float:
    task, _, metric, _ = SETTINGS[setting]
    path = os.path.join(model_dir(work, name), "results",
                        f"ft_{setting}_grid_lr{lr:g}_d{decay:g}.json")
    return io_utils.read_json(path)["trials"][0]["results"][task][metric]


def merge_rows(previous: list[dict], current: list[dict]) -> list[dict]:
    """Rows of an earlier report (other work dirs, other runs) updated by this work dir's:
    a measure measured here replaces the earlier figure, the others are kept."""
    merged = {r["name"]: r for r in previous}
    for row in current:
        old = merged.get(row["name"], {})
        merged[row["name"]] = {**old, **row,
                               "measures": {**old.get("measures", {}), **row["measures"]},
                               "finetune": {**old.get("finetune", {}), **row["finetune"]}}
        if "pretrain_seconds" in old:  # a model re-trained (bit-identically) keeps its first time
            merged[row["name"]]["pretrain_seconds"] = old["pretrain_seconds"]
    return list(merged.values())


def report(work: str, runs: list[dict], out_dir: str, stem: str = "exp5_pretraining_gain",
           selection: str = "") -> str:
    """Writes out_dir/<stem>.{json,md,png}: this work dir's rows merged into the file's earlier
    ones (other work dirs' budgets are kept), the verdicts, the grid and the host. `selection`:
    the --arms / --only arguments the report was written with (named in it)."""
    results_path = os.path.join(out_dir, f"{stem}.json")
    previous = io_utils.read_json(results_path) if os.path.exists(results_path) else {}
    rows = merge_rows(previous.get("rows", []), collect(work, runs))
    grid = dict(previous.get("grid", {}), **grid_table(work))
    measures = [m for m in ("pos/mean", "chunk/mean", "sst/mean", "pos/last", "chunk/last",
                            "sst/last", "chunk_1k", "sst_2k", "chunk_full")
                if any(m in r["measures"] for r in rows)]
    os.makedirs(out_dir, exist_ok=True)
    judged = verdicts(rows, measures)
    io_utils.write_json(results_path,
                        {"rows": rows, "verdicts": judged, "grid": grid,
                         "electra_steps": ELECTRA_STEPS, "size": SIZE, "sizes": SIZES,
                         "pretrain_base": PRETRAIN_BASE, "host": machine_summary()})
    plotted = [m for m in measures if m in MEASURE_LABELS]
    png = os.path.join(out_dir, f"{stem}.png")
    if plotted and not plot(rows, plotted, png):
        common.log(f"matplotlib is not installed: {png} not drawn (pip install matplotlib)")
    header = ["model", "steps", "FLOPs", "pre-train min", "MLM acc", "disc AUC",
              "disc P / R"] + measures
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in rows:
        ev = r.get("pretrain_eval", {})
        cells = [r["name"], str(r["steps"]), f"{r['flops']:.2e}",
                 f"{r['pretrain_seconds'] / 60:.1f}" if "pretrain_seconds" in r else "-",
                 f"{ev['masked_lm_accuracy']:.3f}" if "masked_lm_accuracy" in ev else "-",
                 f"{ev['disc_auc']:.3f}" if "disc_auc" in ev else "-",
                 f"{ev['disc_precision']:.2f} / {ev['disc_recall']:.2f}"
                 if "disc_precision" in ev else "-"]
        for m in measures:
            if m in r["finetune"]:
                ft = r["finetune"][m]
                cells.append(f"{r['measures'][m]:.1f} [" + ", ".join(
                    f"{x:.1f}" for x in ft["scores"]) + "]")
            else:
                cells.append(f"{r['measures'][m]:.1f}" if m in r["measures"] else "-")
        lines.append("| " + " | ".join(cells) + " |")
    verdict_lines = [verdict_line(m, v) for m, v in judged.items()]
    machine = machine_summary()
    md = "\n".join(["# Experiment 5: what pre-training buys (whole corpus, equal FLOPs)", "",
                     f"Written by `python experiments/exp5_pretraining_gain.py report "
                     f"--work-dir WORK{selection} --report-name {stem}`; host: "
                     f"{machine['nproc']} cores, {machine['cpu']} "
                     f"({', '.join(machine['cpu_flags'])}).", "",
                     *lines, "", "Verdicts at the largest budget (seed ranges):", "",
                     *verdict_lines, "", "Fine-tuning grid (one seed on the dev split carved "
                     "from training data; the chosen point in bold):", "",
                     "| setting | method | rates with decay 0.8 | | | best rate, decay 1.0 |",
                     "|---|---|---|---|---|---|", *[line for setting in SETTINGS
                                                     for line in grid.get(setting, [])], ""])
    path = os.path.join(out_dir, f"{stem}.md")
    io_utils.write_text(path, md)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("stage", choices=["pretrain", "probe", "finetune", "report"])
    parser.add_argument("--settings", nargs="*", default=["chunk_1k", "sst_2k"],
                        choices=sorted(SETTINGS), help="fine-tuning settings to run")
    parser.add_argument("--work-dir", default=os.path.join(common.REPO, "..", "electra_study_work"))
    parser.add_argument("--only", nargs="*", help="run only these model names")
    parser.add_argument("--arms", nargs="*", default=[],
                        choices=sorted(set(common.ARMS) - {"electra", "bert"}),
                        help="further arms beside ELECTRA and BERT (largest budget, every seed)")
    parser.add_argument("--report-name", default="exp5_pretraining_gain",
                        help="report: the results file stem under experiments/results (its "
                             "earlier rows are kept unless this work dir measured them again)")
    args = parser.parse_args()
    work = os.path.abspath(args.work_dir)
    ensure_data(work)
    runs = [r for r in plan(work, tuple(args.arms))
            if not args.only or r["name"] in args.only]
    io_utils.write_json(os.path.join(work, "plan.json"), runs)
    if args.stage == "pretrain":
        for run in runs:
            pretrain(work, run)
    names = [random_name(s) for s in RANDOM_SEEDS] + [
        r["name"] for r in runs if r["size"] == SIZE and is_trained(work, r["name"])]
    for seed in RANDOM_SEEDS:
        ensure_random_model(work, seed)
    if args.stage == "probe":
        for name in names + [r["name"] for r in runs if r["size"] != SIZE]:
            if is_trained(work, name):
                probe(work, name)
    if args.stage == "report":
        out_dir = os.path.join(common.REPO, "experiments", "results")
        selection = "".join(f" --{flag} {' '.join(values)}"
                            for flag, values in (("arms", args.arms), ("only", args.only))
                            if values)
        common.log(f"wrote {report(work, runs, out_dir, args.report_name, selection)}")
    if args.stage == "finetune":
        # The grid runs on one model per method: the largest budget, seed 0.
        reference = {method: reference_name(method)
                     for method in ("random", "electra", "bert", *args.arms)}
        for setting in args.settings:
            chosen = {method: best_grid_point(work, name, setting)
                      for method, name in reference.items() if is_trained(work, name)}
            io_utils.write_json(os.path.join(work, f"grid_{setting}.json"),
                                {m: list(p) for m, p in chosen.items()})
            for name in names:
                method = name.split("_")[0]
                if setting in SEED0_ONLY and method != "random" and \
                        name not in reference.values():
                    continue
                if method in chosen:
                    finetune(work, name, setting, *chosen[method], "final",
                             1 if name.startswith("random") else 3)


if __name__ == "__main__":
    main()
