"""How far the official TPU rule for several replicas (`clip_per_replica`: each replica's loss over
its own examples, its gradient clipped, the clipped gradients summed) takes pre-training from the
default rule (the global batch's gradient, clipped once), on 2 logical CPU replicas.

    python tools/replica_rules.py [--steps 20]

Both runs start from the same weights and see the same batches and masks (the tiny model and
data of the tests, dropout off). Prints each run's loss curve and gradient norms, and per
variable the relative difference of the weights' change after the first update (step 2: the
rate is 0 at step 1) and at the end (docs/FIDELITY.md quotes it).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests")]

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)

import pretrain_fixtures as fx  # noqa: E402
from configure_pretraining import PretrainingConfig  # noqa: E402
from pretrain import masking  # noqa: E402
from pretrain.trainer import Trainer  # noqa: E402
from pretrain import input_pipeline  # noqa: E402

SPECIAL = masking.SpecialIds(pad=fx.PAD, cls=fx.CLS, sep=fx.SEP, mask=fx.MASK)


def run(data_dir: str, steps: int, per_replica: bool):
    hparams = fx.tiny_hparams(num_train_steps=steps, clip_per_replica=per_replica,
                              adam_bias_correction=False, lr_decay_after_warmup=False)
    hparams["model_hparam_overrides"].update(hidden_dropout_prob=0.0,
                                             attention_probs_dropout_prob=0.0)
    config = PretrainingConfig.from_hparams("replica_rules", data_dir, hparams)
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    trainer = Trainer(config, SPECIAL, strategy)
    start = {k: v.numpy() for k, v in trainer.model_vars.items()}
    files = input_pipeline.find_files(config.pretrain_tfrecords, config.eval_tfrecords).train
    iterator = trainer.train_iterator(files)
    losses, norms, after_first = [], [], None
    for step in range(steps):
        result = trainer.train_steps(iterator, 1)
        losses.append(result.metrics["loss"])
        norms.append(result.metrics["global_norm"])
        if step == 1:  # the first update: the official schedule's rate is 0 at step 0
            after_first = {k: v.numpy() for k, v in trainer.model_vars.items()}
    end = {k: v.numpy() for k, v in trainer.model_vars.items()}
    return start, after_first, end, losses, norms


def relative_change_difference(start, a, b):
    """Per variable |(a - start) - (b - start)| / |b - start| (Frobenius norms)."""
    out = {}
    for name in start:
        base = np.linalg.norm(b[name] - start[name])
        if base > 0:
            out[name] = float(np.linalg.norm(a[name] - b[name]) / base)
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rule", choices=["default", "per_replica"],
                        help="run one rule and save its results to --out (both rules in one "
                             "process would share collective instance keys)")
    parser.add_argument("--out")
    args = parser.parse_args()
    if args.rule:
        data_dir = os.path.join(os.path.dirname(args.out), "data")
        if not os.path.exists(data_dir):
            fx.write_data(data_dir)
        start, first, end, losses, norms = run(data_dir, args.steps, args.rule == "per_replica")
        np.savez(args.out, losses=losses, norms=norms,
                 **{f"{kind}:{k}": v for kind, values in
                    (("start", start), ("first", first), ("end", end))
                    for k, v in values.items()})
        return
    work = tempfile.mkdtemp(prefix="replica_rules_")
    results = {}
    for rule in ("default", "per_replica"):
        out = os.path.join(work, f"{rule}.npz")
        subprocess.run([sys.executable, __file__, "--steps", str(args.steps), "--rule", rule,
                        "--out", out], check=True)
        saved = np.load(out)
        results[rule] = {kind: {k.split(":", 1)[1]: saved[k] for k in saved.files
                                if k.startswith(kind + ":")} for kind in ("start", "first", "end")}
        results[rule].update(losses=saved["losses"].tolist(), norms=saved["norms"].tolist())
    default, per_replica = results["default"], results["per_replica"]
    start = default["start"]
    assert all(np.array_equal(start[k], per_replica["start"][k]) for k in start)
    first = relative_change_difference(start, per_replica["first"], default["first"])
    end = relative_change_difference(start, per_replica["end"], default["end"])
    print(json.dumps({
        "loss_default": default["losses"], "loss_per_replica": per_replica["losses"],
        "norm_default": default["norms"], "norm_per_replica": per_replica["norms"],
        "first_step_update_rel_diff_median": float(np.median(list(first.values()))),
        "first_step_update_rel_diff_max": max(first.values()),
        f"after_{args.steps}_steps_change_rel_diff_median": float(np.median(list(end.values()))),
        f"after_{args.steps}_steps_change_rel_diff_max": max(end.values()),
    }, indent=1))


if __name__ == "__main__":
    main()
