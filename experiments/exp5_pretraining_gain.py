"""Experiment 5: what pre-training buys at this machine's capacity (issue 16).

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
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from configure_pretraining import PretrainingConfig  # noqa: E402
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
                     "--max-seq-length", str(SEQ), "--num-processes", "2", "--no-progress"],
                    os.path.join(work, "logs", "build_data.log"))
    return data


def spm_model(work: str) -> str:
    return os.path.join(data_dir(work), "pretrain_tfrecords", "spm.model")


def hparams(work: str, method: str, steps: int, seed: int, size: str = SIZE) -> dict:
    h = dict(PRETRAIN_BASE, **SIZES[size], vocab_file=spm_model(work), seed=seed,
             num_train_steps=steps, num_warmup_steps=max(10, steps // 10))
    if method == "bert":
        h["electra_objective"] = False
    return h


def step_flops(work: str, method: str, size: str = SIZE) -> int:
    config = PretrainingConfig.from_hparams("flops", data_dir(work),
                                            hparams(work, method, 100, 0, size))
    return pretrain_step_flops(config)["total"]


def plan(work: str) -> list[dict]:
    """Every pre-training run of the study, in the order they are run."""
    electra, bert = step_flops(work, "electra"), step_flops(work, "bert")
    runs = []

    def add(method, electra_steps, seed, size=SIZE):
        per_step = electra if method == "electra" else bert
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
    return runs


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("stage", choices=["pretrain", "probe", "report"])
    parser.add_argument("--work-dir", default=os.path.join(common.REPO, "..", "electra_study_work"))
    parser.add_argument("--only", nargs="*", help="run only these model names")
    args = parser.parse_args()
    work = os.path.abspath(args.work_dir)
    ensure_data(work)
    runs = [r for r in plan(work) if not args.only or r["name"] in args.only]
    io_utils.write_json(os.path.join(work, "plan.json"), runs)
    if args.stage == "pretrain":
        for run in runs:
            pretrain(work, run)


if __name__ == "__main__":
    main()
