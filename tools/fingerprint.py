"""Fingerprints of short training runs: every tensor after a few steps, for each pre-training
objective and each fine-tuning family. Taken before and after a refactoring, they show that the
code still computes the same thing.

    python tools/fingerprint.py --output before.json      # on the old code
    python tools/fingerprint.py --output after.json       # on the new code
    python tools/fingerprint.py --compare before.json after.json
    python tools/fingerprint.py --record      # tests/data/fingerprints.json (test_fingerprints)

A fingerprint holds, per run, the sha256 of every tensor's bytes (bit-identity on one machine)
and per-tensor statistics (sum, sum of squares, first values: comparable across machines within
a tolerance). `tests/test_fingerprints.py` keeps the weights' statistics and the eval metrics.
Fine-tuning runs read the shared data (../shared/data: SST-2, CoNLL-2000, SQuAD 1.1); they are
skipped when it is absent.
"""
import argparse
import hashlib
import json
import os
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests")]

import configure_finetuning  # noqa: E402
import run_finetuning  # noqa: E402
import run_pretraining  # noqa: E402
from finetune import trainer  # noqa: E402
from pretrain import evaluation  # noqa: E402
import pretrain_fixtures as fx  # noqa: E402
from util import checkpoint  # noqa: E402

STEPS = 3
# One short run per objective of the paper (configure_pretraining.py's hparams).
PRETRAIN_VARIANTS = {
    "electra": {},
    "bert_mlm": {"electra_objective": False},
    "electra_15": {"electra_15": True},
    "replace_mlm": {"electra_objective": False, "replace_mlm": True},
    "all_tokens_mlm": {"electra_objective": False, "all_tokens_mlm": True},
    "unigram_generator": {"unigram_generator": True},
    "uniform_generator": {"uniform_generator": True},
    "adversarial_generator": {"adversarial_generator": True},
    "electric": {"electra_objective": False, "electric_objective": True,
                 "two_tower_generator": True},
    "tied_generator": {"untied_generator": False},
    "untied_embeddings": {"untied_generator_embeddings": True},
    "bfloat16": {"compute_dtype": "bfloat16"},
}
SHARED = os.environ.get("ELECTRA_SHARED_DATA", os.path.join(ROOT, "..", "shared", "data"))
TINY = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
        "intermediate_size": 64, "max_position_embeddings": 128}


def summarize(tensors: dict[str, np.ndarray]) -> dict:
    """sha256 and statistics of every tensor."""
    out = {}
    for name in sorted(tensors):
        value = np.asarray(tensors[name])
        flat = value.astype(np.float64).reshape(-1)
        out[name] = {"sha256": hashlib.sha256(value.tobytes()).hexdigest(),
                     "shape": list(value.shape), "sum": float(flat.sum()),
                     "sumsq": float(np.square(flat).sum()), "first": flat[:3].tolist()}
    return out


def pretrain_fingerprint(work: str, name: str, overrides: dict) -> dict:
    data_dir = os.path.join(work, name)
    fx.write_data(data_dir)
    hparams = fx.tiny_hparams(num_train_steps=STEPS, save_checkpoints_steps=STEPS,
                              iterations_per_loop=STEPS, do_eval=True, num_eval_steps=2,
                              **overrides)
    code = run_pretraining.main(["--data-dir", data_dir, "--model-name", "m",
                                 "--hparams", json.dumps(hparams)])
    if code != 0:
        raise RuntimeError(f"pre-training {name} exited {code}")
    model_dir = os.path.join(data_dir, "models", "m")
    result = {"tensors": summarize(checkpoint.read_all(model_dir))}
    history = os.path.join(model_dir, "results", evaluation.HISTORY_FILE)
    if os.path.exists(history):
        with open(history, encoding="utf-8") as f:
            result["eval"] = json.load(f)
    return result


def finetune_fingerprint(work: str, name: str, hparams: dict) -> dict:
    values = dict(vocab_file=os.path.join(SHARED, "vocab", "bert-uncased-vocab.txt"),
                  init_checkpoint="", model_hparam_overrides=TINY, embedding_size=16,
                  train_batch_size=8, eval_batch_size=8, num_train_epochs=1.0,
                  learning_rate=1e-3, adam_bias_correction=True, max_train_examples=24,
                  max_eval_examples=16,
                  # Full padding, as when the record was taken: batches cut to length buckets
                  # or packed to their real tokens draw their dropout masks for another shape
                  # (tests/test_bucketing.py checks that both otherwise compute what full
                  # padding does).
                  pad_to_multiple_of=0, remove_padding=False)
    values.update(hparams)
    config = configure_finetuning.FinetuningConfig.from_hparams("m", os.path.join(work, name),
                                                                values)
    summary = run_finetuning.run_finetuning(config)
    return {"tensors": summarize(checkpoint.read_all(trainer.trial_dir(config, 1))),
            "eval": summary["median"]}


def finetune_variants() -> dict[str, dict]:
    return {
        "sst": dict(task_names=["sst"], raw_data_dir=os.path.join(SHARED, "glue", "{task}"),
                    max_seq_length=32),
        "chunk": dict(task_names=["chunk"], raw_data_dir=os.path.join(SHARED, "{task}"),
                      heldout_dev_sentences=16, max_seq_length=64),
        "squadv1": dict(task_names=["squadv1"],
                        raw_data_dir=os.path.join(SHARED, "squad", "{task}"), max_seq_length=96,
                        max_query_length=24, doc_stride=48),
    }


def fingerprints(pretrain: bool = True, finetune: bool = True) -> dict:
    result = {}
    with tempfile.TemporaryDirectory() as work:
        if pretrain:
            for name, overrides in PRETRAIN_VARIANTS.items():
                result[f"pretrain/{name}"] = pretrain_fingerprint(work, name, overrides)
        if finetune and os.path.isdir(SHARED):
            for name, hparams in finetune_variants().items():
                result[f"finetune/{name}"] = finetune_fingerprint(work, name, hparams)
    return result


def _flat_metrics(value, prefix: str = "") -> dict[str, float]:
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            out.update(_flat_metrics(v, f"{prefix}{k}/"))
        return out
    if isinstance(value, list):  # pre-training eval history: the last evaluation
        return _flat_metrics(value[-1], prefix) if value else {}
    return {prefix[:-1]: float(value)} if isinstance(value, (int, float)) else {}


def compact(result: dict) -> dict:
    """The test's record: each weight's [sum, sum of squares] (optimizer slots and counters
    left out: they follow from the weights' history) and the eval metrics."""
    out = {}
    for run, fingerprint in result.items():
        weights = {n: [t["sum"], t["sumsq"]] for n, t in fingerprint["tensors"].items()
                   if not n.endswith(("/adam_m", "/adam_v")) and "state" not in n
                   and n != "global_step"}
        out[run] = {"weights": weights, "eval": _flat_metrics(fingerprint.get("eval", {}))}
    return out


def compare(a: dict, b: dict, rtol: float = 1e-6) -> list[str]:
    """Differences between two fingerprints; 'bit-identical' lines for runs that are."""
    lines = []
    for run in sorted(set(a) | set(b)):
        if run not in a or run not in b:
            lines.append(f"{run}: only in {'the first' if run in a else 'the second'}")
            continue
        ta, tb = a[run]["tensors"], b[run]["tensors"]
        if set(ta) != set(tb):
            lines.append(f"{run}: tensors differ: {sorted(set(ta) ^ set(tb))[:5]}")
            continue
        changed = [n for n in ta if ta[n]["sha256"] != tb[n]["sha256"]]
        if not changed:
            same_eval = a[run].get("eval") == b[run].get("eval")
            lines.append(f"{run}: bit-identical ({len(ta)} tensors)" + (
                "" if same_eval else "; the eval metrics differ BEYOND rtol 0 (or one side "
                "has none)"))
            continue
        worst = max((abs(ta[n][k] - tb[n][k]) / max(abs(ta[n][k]), 1e-12), n, k)
                    for n in changed for k in ("sum", "sumsq"))
        lines.append(f"{run}: {len(changed)} of {len(ta)} tensors differ in their bits; largest "
                     f"relative change {worst[0]:.2e} ({worst[1]} {worst[2]})"
                     + (" WITHIN" if worst[0] <= rtol else " BEYOND") + f" rtol {rtol:g}")
    return lines


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--output", help="write the fingerprints of this code here")
    p.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"))
    p.add_argument("--pretrain-only", action="store_true")
    p.add_argument("--record", action="store_true",
                   help="write tests/data/fingerprints.json for tests/test_fingerprints.py")
    args = p.parse_args(argv)
    if args.record:
        record = compact(fingerprints())
        path = os.path.join(ROOT, "tests", "data", "fingerprints.json")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            json.dump(record, f, indent=0, sort_keys=True)
            f.write("\n")
        print(f"wrote {path} ({len(record)} runs)")
        return 0
    if args.compare:
        runs = []
        for path in args.compare:
            with open(path, encoding="utf-8") as f:
                runs.append(json.load(f))
        lines = compare(*runs)
        print("\n".join(lines))
        return 0 if all("BEYOND" not in line and "only in" not in line for line in lines) else 1
    result = fingerprints(finetune=not args.pretrain_only)
    text = json.dumps(result, indent=1, sort_keys=True)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
