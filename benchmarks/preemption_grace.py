"""The grace period a preempted pre-training run needs: SIGTERM to exit, per model size.

A signalled run (util/preemption.py) finishes the step in flight, writes a checkpoint and exits
75, so the time from SIGTERM to exit is at most one step + one checkpoint write + teardown. This
script measures it on this machine: it starts `run_pretraining.py` on synthetic tfrecords, waits
until training is under way (the step-2 checkpoint exists), sends SIGTERM at a random moment
within the next step, and times the exit; the same command then resumes and is signalled again,
`--rounds` times per configuration.

  python benchmarks/preemption_grace.py                      # small b128 s128, base b8 s512
  python benchmarks/preemption_grace.py --configs small:128:128 --rounds 5

Writes benchmarks/results/preemption_grace.json (and prints a table). The schedulers' grace
period (often 30 s on spot VMs, Kubernetes' default terminationGracePeriodSeconds) must exceed
the worst figure, or the run is SIGKILLed mid-save and loses the work since its last checkpoint.
"""
import argparse
import glob
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402  (sets sys.path and the TF log level)
from pretrain_throughput import VOCAB, write_synthetic_tfrecords  # noqa: E402

EXIT_PREEMPTED = 75


def _newest_step(model_dir: str) -> int:
    steps = [int(m.group(1)) for p in glob.glob(os.path.join(model_dir, "model.ckpt-*.index"))
             if (m := re.search(r"-(\d+)\.index$", p))]
    return max(steps, default=-1)


def one_round(data: str, hparams: dict, rng: random.Random, log_path: str) -> dict:
    model_dir = os.path.join(data, "models", "grace")
    start_step = max(_newest_step(model_dir), 0)  # a fresh run saves step 1 first
    command = [sys.executable, os.path.join(common.ROOT, "run_pretraining.py"), "--data-dir",
               data, "--model-name", "grace", "--hparams", json.dumps(hparams)]
    with open(log_path, "w", encoding="utf-8") as log:
        child = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                 env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
        # Under way: two checkpoints after the one it resumed from (every step saves until then).
        times = []
        while len(times) < 2:
            if child.poll() is not None:
                raise RuntimeError(f"run ended (exit {child.returncode}) before training; "
                                   f"see {log_path}")
            if _newest_step(model_dir) >= start_step + 1 + len(times):
                times.append(time.time())
            time.sleep(0.05)
        step_secs = times[1] - times[0]  # one step + one checkpoint write
        time.sleep(rng.uniform(0.0, step_secs))
        sent = time.time()
        child.send_signal(signal.SIGTERM)
        code = child.wait(timeout=3600)
        exited = time.time()
    with open(log_path, encoding="utf-8") as f:
        output = f.read()
    stopped = re.search(r"stopped on SIGTERM at step (\d+), checkpoint saved, ([\d.]+)s after",
                        output)
    saved = re.findall(r"saved checkpoint \S+ \(step \d+, [^)]*?(\d+(?:\.\d+)?)s this run\)",
                       output)
    return {"exit_status": code, "step_plus_save_secs": round(step_secs, 2),
            "signal_to_exit_secs": round(exited - sent, 2),
            "signal_to_saved_secs": float(stopped.group(2)) if stopped else None,
            "stopped_at_step": int(stopped.group(1)) if stopped else None,
            "newest_checkpoint": _newest_step(model_dir), "load": os.getloadavg()[0],
            "checkpoints_logged": len(saved)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", nargs="*", default=["small:128:128", "base:8:512"],
                        help="size:batch:seq (size small or base)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", default=os.path.join(common.ROOT, "benchmarks", "results",
                                                         "preemption_grace.json"))
    args = parser.parse_args()
    rng = random.Random(args.seed)
    results = {"machine": common.machine_summary(),
               "dtype": args.dtype, "configs": []}
    for spec in args.configs:
        size, batch, seq = spec.split(":")
        work = tempfile.mkdtemp(prefix="grace_")
        try:
            records = os.path.join(work, "pretrain_tfrecords")
            os.makedirs(records)
            write_synthetic_tfrecords(records, int(seq), count=max(256, 4 * int(batch)))
            shutil.copyfile(os.path.join(common.SHARED, "data", "vocab",
                                         "bert-uncased-vocab.txt"),
                            os.path.join(work, "vocab.txt"))
            hparams = dict(model_size=size, vocab_size=VOCAB, train_batch_size=int(batch),
                           max_seq_length=int(seq), compute_dtype=args.dtype,
                           num_train_steps=100000, save_checkpoints_steps=1,
                           iterations_per_loop=1, do_eval=False, keep_checkpoint_max=2)
            rounds = []
            for r in range(args.rounds):
                # Every step saves until the signal (to see the run under way); the signal
                # lands in a step whose loop would otherwise run on.
                rounds.append(one_round(work, hparams, rng, os.path.join(work, f"round{r}.log")))
                print(f"{spec} round {r + 1}: {rounds[-1]}", flush=True)
            worst = max(x["signal_to_exit_secs"] for x in rounds)
            results["configs"].append({"config": spec, "rounds": rounds,
                                       "worst_signal_to_exit_secs": worst})
        finally:
            shutil.rmtree(work, ignore_errors=True)
    os.makedirs(os.path.dirname(args.output), exist_ok=True)
    with open(args.output + ".tmp", "w", encoding="utf-8") as f:
        json.dump(results, f, indent=2)
    os.replace(args.output + ".tmp", args.output)
    print("\n| config | step + checkpoint (s) | SIGTERM to exit (s), per round | worst |")
    print("|---|---|---|---|")
    for c in results["configs"]:
        print(f"| {c['config']} | " + ", ".join(f"{x['step_plus_save_secs']:.1f}"
                                              for x in c["rounds"])
              + " | " + ", ".join(f"{x['signal_to_exit_secs']:.1f}" for x in c["rounds"])
              + f" | {c['worst_signal_to_exit_secs']:.1f} |")


if __name__ == "__main__":
    main()
