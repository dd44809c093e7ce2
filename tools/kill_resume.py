"""Kill-and-resume drill: SIGKILL and SIGTERM/SIGINT a tiny pre-training run and a fine-tuning run
many times, resume each time with the same command, and compare the outcome with runs that were
never interrupted.

    python tools/kill_resume.py                      # 10 kills each, work dir /tmp/kill_resume
    python tools/kill_resume.py --kills 10 --seed 3 --work-dir /tmp/kr --keep

What it does:
  1. writes a toy corpus, vocab and GLUE-style task (data built by build_pretraining_dataset.py);
  2. pre-trains "reference" once, uninterrupted, and "victim" with the same hparams, killing the
     victim `--kills` times (a) at random moments once it has made progress, (b) during start-up
     and (c) inside a write: just before the N-th rename or delete of a checkpoint data/index
     file, the `checkpoint` state file, a results file or a pruned old checkpoint; (d) SIGTERM or
     SIGINT at random moments, and SIGTERM inside a checkpoint write: the run must exit 75 with
     its newest checkpoint at the step it says it stopped at. Each kill is followed by the same
     command again; after the last one the victim runs to the end;
  3. compares every checkpoint tensor (weights, Adam slots, step, data position) and the final
     eval figures (results JSON and eval history) of victim and reference;
  4. does the same for a two-trial fine-tuning run (both initialised from the reference model),
     comparing each trial's checkpoint and the dev results.
Prints one line per kill and a verdict; writes <work-dir>/kill_resume_report.json. Exit status 0
when every comparison holds to float tolerance (rtol 1e-5, atol 1e-6), else 1.

Internal mode, used by this script and tests/test_reliability_kill.py: run SCRIPT with a hook
that SIGKILLs the process just before the ORDINAL-th os.replace/os.remove (`--op`) of a file
under WATCH whose name matches PATTERN (or sends it --signal, or pauses it there until the file
--pause-until exists):

    python tools/kill_resume.py --child --watch DIR --pattern 'model.ckpt-*.index' \\
        --op replace --ordinal 2 [--event-log FILE] -- run_pretraining.py --data-dir ...
"""
import argparse
import fnmatch
import glob
import json
import os
import random
import re
import runpy
import shutil
import signal
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
NUM_WORDS = 40
VOCAB = SPECIAL + [f"w{i}" for i in range(NUM_WORDS)] + ["."]
TINY = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
        "intermediate_size": 64, "max_position_embeddings": 64}
RTOL, ATOL = 1e-5, 1e-6


# -- the kill hook (child side) ---------------------------------------------------------------


class KillHook:
    """Kills the process just before the `ordinal`-th matching file operation.

    op: "replace" (os.replace / os.rename: the commit step of every atomic write), "remove"
    (os.remove / os.unlink: pruning old checkpoints) or "any". A path matches when it lies under
    `watch_dir` and its base name matches the glob `pattern`. `action` defaults to SIGKILL; tests
    pass one that raises instead.
    """

    def __init__(self, watch_dir: str, pattern: str, op: str, ordinal: int,
                 event_log: str | None = None, action=None):
        self.watch = os.path.abspath(watch_dir) + os.sep
        self.pattern, self.op, self.ordinal = pattern, op, ordinal
        self.event_log = event_log
        self.action = action or (lambda: os.kill(os.getpid(), signal.SIGKILL))
        self.count = 0
        self.fired = None
        self._saved = {}

    def _matches(self, op: str, path) -> bool:
        if self.op not in ("any", op):
            return False
        path = os.path.abspath(os.fspath(path))
        return path.startswith(self.watch) and fnmatch.fnmatch(os.path.basename(path),
                                                               self.pattern)

    def _wrap(self, name: str, op: str, target_arg: int):
        real = getattr(os, name)

        def hooked(*args, **kwargs):
            if self.fired is None and self._matches(op, args[target_arg]):
                self.count += 1
                if self.count == self.ordinal:
                    self.fired = f"before os.{name} -> {os.path.basename(args[target_arg])}"
                    if self.event_log:
                        with open(self.event_log, "a", encoding="utf-8") as f:
                            f.write(self.fired + "\n")
                            f.flush()
                            os.fsync(f.fileno())
                    self.action()
            return real(*args, **kwargs)

        self._saved[name] = real
        setattr(os, name, hooked)

    def install(self) -> "KillHook":
        self._wrap("replace", "replace", 1)
        self._wrap("rename", "replace", 1)
        self._wrap("remove", "remove", 0)
        self._wrap("unlink", "remove", 0)
        return self

    def uninstall(self) -> None:
        for name, real in self._saved.items():
            setattr(os, name, real)
        self._saved = {}


def _wait_for_file(path: str) -> None:
    while not os.path.exists(path):
        time.sleep(0.02)


def child_main(argv: list[str]) -> None:
    """--child mode: install the hook, then run the script as __main__ with its own argv."""
    split = argv.index("--")
    parser = argparse.ArgumentParser(prog="kill_resume.py --child")
    parser.add_argument("--child", action="store_true")
    parser.add_argument("--watch", required=True)
    parser.add_argument("--pattern", required=True)
    parser.add_argument("--op", choices=["replace", "remove", "any"], default="replace")
    parser.add_argument("--ordinal", type=int, required=True)
    parser.add_argument("--event-log")
    parser.add_argument("--signal", choices=["KILL", "TERM", "INT"], default="KILL",
                        help="what the process sends itself at the hook (TERM/INT: a preemption "
                             "signal arriving while that file is being written)")
    parser.add_argument("--pause-until", metavar="FILE",
                        help="instead of a signal, wait at the hook until FILE exists (a test "
                             "lines up what another process does with this moment)")
    args = parser.parse_args(argv[:split])
    script, script_args = argv[split + 1], argv[split + 2:]
    signum = getattr(signal, f"SIG{args.signal}")
    action = (lambda: _wait_for_file(args.pause_until)) if args.pause_until else \
        (lambda: os.kill(os.getpid(), signum))
    KillHook(args.watch, args.pattern, args.op, args.ordinal, args.event_log,
             action=action).install()
    sys.argv = [script] + script_args
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    runpy.run_path(script, run_name="__main__")


# -- toy data ---------------------------------------------------------------------------------


def write_vocab(path: str) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(VOCAB) + "\n")


def _sentence(rng: random.Random, successor: list[int]) -> list[int]:
    words = [rng.randrange(NUM_WORDS)]
    for _ in range(rng.randint(4, 11)):
        words.append(successor[words[-1]] if rng.random() < 0.85 else rng.randrange(NUM_WORDS))
    return words


def write_corpus(directory: str, seed: int, documents: int = 120) -> None:
    """Documents of sentences that walk a random successor table (learnable, a little noisy)."""
    rng = random.Random(seed)
    successor = list(range(NUM_WORDS))
    rng.shuffle(successor)
    os.makedirs(directory, exist_ok=True)
    for part in range(2):
        lines = []
        for _ in range(documents // 2):
            for _ in range(rng.randint(3, 8)):
                lines.append(" ".join(f"w{w}" for w in _sentence(rng, successor)) + " .")
            lines.append("")
        with open(os.path.join(directory, f"part{part}.txt"), "w", encoding="utf-8") as f:
            f.write("\n".join(lines))


def write_task(directory: str, seed: int, n_train: int = 256, n_dev: int = 64) -> None:
    """An SST-layout task (sentence<TAB>label): label 1 when the sentence mentions w0..w9."""
    rng = random.Random(seed + 1)
    successor = list(range(NUM_WORDS))
    rng.shuffle(successor)
    os.makedirs(directory, exist_ok=True)
    for name, n in (("train.tsv", n_train), ("dev.tsv", n_dev)):
        rows = ["sentence\tlabel"]
        for _ in range(n):
            words = _sentence(rng, successor)
            rows.append(" ".join(f"w{w}" for w in words) + f"\t{int(min(words) < 10)}")
        with open(os.path.join(directory, name), "w", encoding="utf-8") as f:
            f.write("\n".join(rows) + "\n")


def pretrain_hparams(steps: int) -> dict:
    return dict(vocab_size=len(VOCAB), embedding_size=16, max_seq_length=32,
                model_hparam_overrides=TINY, generator_hidden_size=0.5, train_batch_size=8,
                eval_batch_size=8, learning_rate=2e-3, num_warmup_steps=20,
                adam_bias_correction=True, lr_decay_after_warmup=True, num_train_steps=steps,
                save_checkpoints_steps=10, iterations_per_loop=5, do_eval=True,
                eval_every_steps=50, num_eval_steps=4, keep_checkpoint_max=3, seed=1)


def finetune_hparams(init_checkpoint: str) -> dict:
    return dict(task_names=["sst"], vocab_size=len(VOCAB), max_seq_length=32,
                train_batch_size=8, eval_batch_size=8, predict_batch_size=8,
                num_train_epochs=4.0, save_checkpoints_steps=10, iterations_per_loop=5,
                num_trials=2, learning_rate=1e-3, adam_bias_correction=True,
                init_checkpoint=init_checkpoint)


def prepare(work: str, seed: int) -> str:
    """Corpus, vocab, task data and pre-training tfrecords under `work`; returns the data dir."""
    data = os.path.join(work, "data")
    write_corpus(os.path.join(work, "corpus"), seed)
    os.makedirs(data, exist_ok=True)
    write_vocab(os.path.join(data, "vocab.txt"))
    write_task(os.path.join(data, "finetuning_data", "sst"), seed)
    command = [sys.executable, os.path.join(REPO, "build_pretraining_dataset.py"),
               "--corpus-dir", os.path.join(work, "corpus"),
               "--vocab-file", os.path.join(data, "vocab.txt"),
               "--output-dir", os.path.join(data, "pretrain_tfrecords"), "--max-seq-length", "32",
               "--num-out-files", "5", "--eval-fraction", "0.2", "--no-progress"]
    subprocess.run(command, check=True, env=_env(), stdout=subprocess.DEVNULL)
    return data


# -- running and killing ----------------------------------------------------------------------


def _env() -> dict:
    return dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL="2")


def pretrain_command(data: str, name: str, hparams: dict) -> list[str]:
    return [os.path.join(REPO, "run_pretraining.py"), "--data-dir", data, "--model-name", name,
            "--hparams", json.dumps(hparams)]


def finetune_command(data: str, name: str, hparams: dict) -> list[str]:
    return [os.path.join(REPO, "run_finetuning.py"), "--data-dir", data, "--model-name", name,
            "--hparams", json.dumps(hparams)]


def _ckpt_steps(pattern: str) -> dict[str, int]:
    """directory -> newest complete checkpoint step, for dirs matching `pattern`."""
    steps: dict[str, int] = {}
    for index in glob.glob(os.path.join(pattern, "model.ckpt-*.index")):
        match = re.search(r"-(\d+)\.index$", index)
        if match:
            d = os.path.dirname(index)
            steps[d] = max(steps.get(d, -1), int(match.group(1)))
    return steps


def progress(pattern: str) -> int:
    """Sum over matching dirs of the newest checkpoint step: grows as the run advances."""
    return sum(_ckpt_steps(pattern).values())


# Where write-mode kills land: (label, op, glob of the file name, highest ordinal to draw,
# whether it only happens near the end of a run: those kills are planned last).
PRETRAIN_WRITES = [("checkpoint data file", "replace", "model.ckpt-*.data-*", 3, False),
                   ("checkpoint index file", "replace", "model.ckpt-*.index", 3, False),
                   ("checkpoint state file", "replace", "checkpoint", 3, False),
                   ("pruning an old checkpoint", "remove", "model.ckpt-*", 3, False),
                   ("eval results", "replace", "unsup_results*", 3, False)]
FINETUNE_WRITES = [("checkpoint data file", "replace", "model.ckpt-*.data-*", 3, False),
                   ("checkpoint index file", "replace", "model.ckpt-*.index", 3, False),
                   ("checkpoint state file", "replace", "checkpoint", 3, False),
                   ("trial results", "replace", "eval_results.json", 1, True),
                   ("results summary", "replace", "sst_results.*", 1, True)]


def plan(kills: int, writes: list, rng: random.Random) -> list[tuple]:
    """A shuffled mix of start-up, random-moment and inside-a-write SIGKILLs, SIGTERM/SIGINT at
    random moments, and SIGTERM inside a checkpoint write (those that can only land near the
    end of a run go last, so the run is not over before every kill is spent)."""
    modes: list[tuple] = [("startup",)]
    for i in range(kills - 1):
        kind = i % 4
        if kind in (1, 3):
            modes.append(("time",) if kind == 1 else ("term", rng.choice(["TERM", "INT"])))
        else:
            label, op, pattern, top, late = writes[(i // 4) % len(writes)]
            # Every other write is hit by SIGTERM instead of SIGKILL (checkpoint files only:
            # the save must complete, then the run stops).
            sig = "TERM" if kind == 2 and "checkpoint" in label else "KILL"
            modes.append(("write", label, op, pattern, rng.randint(1, top), late, sig))
    early = [m for m in modes if not (m[0] == "write" and m[5])]
    rng.shuffle(early)
    return (early + [m for m in modes if m not in early])[:kills]


def drill(name: str, command: list[str], watch: str, progress_glob: str, kills: int,
          writes: list, rng: random.Random, logs: str,
          reference: subprocess.Popen | None = None) -> list[dict]:
    """Runs `command` under `kills` kills, resuming each time, then once more to the end.
    `reference`: the uninterrupted run going on meanwhile; if it fails, the drill stops at the
    next attempt instead of after the last."""
    from util import workers

    records = []
    modes = plan(kills, writes, rng)
    attempt = 0
    while True:
        if reference is not None and reference.poll() not in (None, 0):
            raise RuntimeError(f"the reference {name} run {workers.fate(reference.returncode)}; "
                               f"see its log in {logs}")
        attempt += 1
        mode = modes[attempt - 1] if attempt <= len(modes) else ("final",)
        start_progress = progress(progress_glob)
        log_path = os.path.join(logs, f"{name}_{attempt:02d}.log")
        event_log = os.path.join(logs, f"{name}_{attempt:02d}.event")
        argv = _attempt_argv(mode, command, watch, event_log)
        began = time.time()
        code, killed_by_us, sent, exited = _run_attempt(argv, mode, log_path, progress_glob,
                                                        start_progress, rng)
        with open(log_path, encoding="utf-8", errors="replace") as f:
            output = f.read()
        fired = open(event_log).read().strip() if os.path.exists(event_log) else None
        record = _attempt_record(attempt, mode, code, output, fired, killed_by_us,
                                 start_progress, progress_glob, began, sent, exited)
        records.append(record)
        _print_attempt(name, attempt, mode, record, start_progress)
        _check_attempt(name, attempt, record, log_path, output)
        if code == 0:
            return records
        if attempt > kills + 20:
            raise RuntimeError(f"{name}: no end after {attempt} runs")


def _attempt_argv(mode: tuple, command: list[str], watch: str, event_log: str) -> list[str]:
    """The attempt's command line: under this script's --child watcher for a kill in a write."""
    argv = [sys.executable]
    if mode[0] == "write":
        argv += [os.path.abspath(__file__), "--child", "--watch", watch, "--pattern", mode[3],
                 "--op", mode[2], "--ordinal", str(mode[4]), "--event-log", event_log,
                 "--signal", mode[6], "--"]
    return argv + command


def _run_attempt(argv: list[str], mode: tuple, log_path: str, progress_glob: str,
                 start_progress: int, rng: random.Random) -> tuple:
    """Runs one attempt, signalling it as `mode` says: (exit code, whether we signalled it,
    when the signal was sent, when it exited)."""
    began = time.time()
    with open(log_path, "w", encoding="utf-8") as log_file:
        child = subprocess.Popen(argv, env=_env(), stdout=log_file, stderr=subprocess.STDOUT)
        killed_by_us = False
        if mode[0] == "startup":
            delay = rng.uniform(0.5, 6.0)
            while child.poll() is None and time.time() - began < delay:
                time.sleep(0.02)
            killed_by_us = child.poll() is None
        elif mode[0] in ("time", "term"):
            extra = rng.randint(0, 1) * 10  # wait for 1-2 new checkpoints
            while child.poll() is None and progress(progress_glob) <= start_progress + extra:
                time.sleep(0.02)
            pause = rng.uniform(0.0, 0.5)
            while child.poll() is None and pause > 0:
                time.sleep(0.02)
                pause -= 0.02
            killed_by_us = child.poll() is None
        sent = None
        if killed_by_us:
            sent = time.time()
            child.send_signal(getattr(signal, f"SIG{mode[1]}") if mode[0] == "term"
                              else signal.SIGKILL)
        code = child.wait(timeout=900)
        exited = time.time()
    return code, killed_by_us, sent, exited


def _attempt_record(attempt: int, mode: tuple, code: int, output: str, fired: str | None,
                    killed_by_us: bool, start_progress: int, progress_glob: str, began: float,
                    sent: float | None, exited: float) -> dict:
    """What one attempt did: how it ended, where it was hit, where it resumed from."""
    resumed = re.search(r"resumed from \S+ (?:at step|\(step) (\d+)", output)
    record = {"attempt": attempt, "mode": mode[0], "where": (
        fired or (f"{mode[1]}: not reached" if mode[0] == "write" else None)),
        "killed": code == -signal.SIGKILL, "exit_code": code,
        "resumed_from_step": int(resumed.group(1)) if resumed else None,
        "progress_before": start_progress, "progress_after": progress(progress_glob),
        "seconds": round(time.time() - began, 1)}
    if mode[0] == "time" and killed_by_us:
        record["where"] = "random moment during training"
    if mode[0] == "term" and killed_by_us:
        record["where"] = f"SIG{mode[1]} at a random moment during training"
        record["signal_to_exit_s"] = round(exited - sent, 2)
    if mode[0] == "write" and mode[6] != "KILL" and fired:
        record["where"] = f"SIG{mode[6]} {fired}"
    if code == PREEMPTED:
        record["preempted"] = check_preempted(output, progress_glob)
    if mode[0] == "startup" and killed_by_us:
        record["where"] = f"start-up, {record['seconds']}s after launch"
    return record


def _print_attempt(name: str, attempt: int, mode: tuple, record: dict,
                   start_progress: int) -> None:
    saved = record.get("preempted", {}).get("checkpoint_step")
    ended = "KILLED" if record["killed"] else f"exit {record['exit_code']}"
    print(f"  {name} run {attempt:2d}: {mode[0]:7s} {ended:8s} "
          + (f"saved at step {saved} " if saved is not None else "") +
          f"resumed from {record['resumed_from_step']}, progress "
          f"{start_progress} -> {record['progress_after']} ({record['where'] or 'to the end'})",
          flush=True)


def _check_attempt(name: str, attempt: int, record: dict, log_path: str, output: str) -> None:
    """Raises RuntimeError for an attempt that failed other than by our kill or a clean stop."""
    code = record["exit_code"]
    if code == PREEMPTED and not record["preempted"]["ok"]:
        raise RuntimeError(f"{name} run {attempt}: {record['preempted']['problem']}; see "
                           f"{log_path}")
    if code not in (0, -signal.SIGKILL, PREEMPTED):
        raise RuntimeError(f"{name} run {attempt} failed with exit code {code}; see {log_path}:"
                           f"\n{output[-3000:]}")


PREEMPTED = 75  # util/preemption.py EXIT_PREEMPTED


def check_preempted(output: str, progress_glob: str) -> dict:
    """A run that exited on SIGTERM/SIGINT must say at which step it stopped and have its newest
    checkpoint at exactly that step (nothing lost but the step in flight)."""
    match = re.search(r"stopped on (SIG\w+) at step (\d+)", output)
    if match is None:  # stopped between trials or before an eval: nothing was in flight
        before = re.search(r"stopped on a signal before [^;]*", output)
        return {"ok": before is not None, "where": before.group(0) if before else None,
                "problem": None if before else "exit 75 without saying where it stopped"}
    step = int(match.group(2))
    trial = re.search(r"trial (\d+) stopped on", output)
    steps = _ckpt_steps(progress_glob)
    if trial:
        steps = {d: s for d, s in steps.items() if d.endswith(f"_{trial.group(1)}")}
    newest = max(steps.values(), default=None)
    waited = re.search(r"checkpoint saved, ([\d.]+)s after the signal", output)
    return {"ok": newest == step, "signal": match.group(1), "stopped_at_step": step,
            "checkpoint_step": newest, "seconds_after_signal": float(waited.group(1))
            if waited else None,
            "problem": None if newest == step else
            f"stopped at step {step} but the newest checkpoint is at step {newest}"}


# -- comparisons ------------------------------------------------------------------------------


def compare_checkpoints(reference_dir: str, victim_dir: str) -> dict:
    import numpy as np
    from util import checkpoint

    ref, got = checkpoint.read_all(reference_dir), checkpoint.read_all(victim_dir)
    worst, mismatched, identical = 0.0, [], True
    for name in sorted(set(ref) | set(got)):
        if name not in ref or name not in got:
            mismatched.append(f"{name} missing in {'victim' if name in ref else 'reference'}")
            continue
        a, b = np.asarray(ref[name], np.float64), np.asarray(got[name], np.float64)
        if a.shape != b.shape:
            mismatched.append(f"{name} shapes {a.shape} vs {b.shape}")
            continue
        diff = float(np.max(np.abs(a - b))) if a.size else 0.0
        identical &= diff == 0.0
        worst = max(worst, diff)
        if not np.allclose(b, a, rtol=RTOL, atol=ATOL):
            mismatched.append(f"{name} max abs diff {diff:.3g}")
    return {"tensors": len(ref), "global_step": int(got.get("global_step", -1)),
            "max_abs_diff": worst, "bit_identical": identical, "mismatched": mismatched}


def _numbers(value, prefix=""):
    """Flattens nested JSON to {path: number}."""
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            out.update(_numbers(v, f"{prefix}{k}/"))
        return out
    if isinstance(value, list):
        out = {}
        for i, v in enumerate(value):
            # Eval history entries are keyed by their step, so a missing one is named.
            key = f"step {v['global_step']}" if isinstance(v, dict) and "global_step" in v else i
            out.update(_numbers(v, f"{prefix}{key}/"))
        return out
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return {prefix.rstrip("/"): float(value)}
    return {}


def compare_json(reference_path: str, victim_path: str, ignore=()) -> dict:
    import math
    with open(reference_path, encoding="utf-8") as f:
        ref = _numbers(json.load(f))
    with open(victim_path, encoding="utf-8") as f:
        got = _numbers(json.load(f))
    ref = {k: v for k, v in ref.items() if not any(i in k for i in ignore)}
    got = {k: v for k, v in got.items() if not any(i in k for i in ignore)}
    mismatched = [k for k in sorted(set(ref) | set(got))
                  if k not in ref or k not in got
                  or not math.isclose(got[k], ref[k], rel_tol=RTOL, abs_tol=ATOL)]
    return {"file": os.path.basename(victim_path), "values": len(ref),
            "mismatched": [f"{k}: {ref.get(k)} vs {got.get(k)}" for k in mismatched]}


# -- main -------------------------------------------------------------------------------------


def _parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "))
    parser.add_argument("--work-dir", default="/tmp/kill_resume",
                        help="scratch dir (emptied first; default /tmp/kill_resume)")
    parser.add_argument("--kills", type=int, default=10, help="kills per run (default 10)")
    parser.add_argument("--seed", type=int, default=0, help="seeds the kill plan and the toy data")
    parser.add_argument("--steps", type=int, default=500,
                        help="pre-training steps (default 500)")
    parser.add_argument("--skip-finetune", action="store_true",
                        help="only the pre-training drill")
    parser.add_argument("--keep", action="store_true", help="keep the work dir afterwards")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--child" in argv[:argv.index("--") if "--" in argv else len(argv)]:
        child_main(argv)
        return 0
    args = _parse_args(argv)
    sys.path.insert(0, REPO)
    rng = random.Random(args.seed)
    work = os.path.abspath(args.work_dir)
    shutil.rmtree(work, ignore_errors=True)
    logs = os.path.join(work, "logs")
    os.makedirs(logs)
    started = time.time()
    data = prepare(work, args.seed)
    report: dict = {"kills": args.kills, "seed": args.seed, "steps": args.steps}
    ref_dir = _pretrain_drill(args, data, logs, rng, report)
    if not args.skip_finetune:
        _finetune_drill(args, data, logs, rng, report, ref_dir)
    ok = _report(args, work, report, started)
    if not args.keep and ok:
        shutil.rmtree(os.path.join(work, "data"), ignore_errors=True)
    return 0 if ok else 1


def _pretrain_drill(args: argparse.Namespace, data: str, logs: str, rng: random.Random,
                    report: dict) -> str:
    """The killed pre-training run beside an uninterrupted one, compared; the reference dir."""
    print(f"pre-training: {args.steps} steps, checkpoint every 10, eval every 50; "
          f"{args.kills} kills", flush=True)
    hparams = pretrain_hparams(args.steps)
    models = os.path.join(data, "models")
    reference = subprocess.Popen([sys.executable] + pretrain_command(data, "reference", hparams),
                                 env=_env(), stdout=subprocess.DEVNULL,
                                 stderr=open(os.path.join(logs, "pretrain_reference.log"), "w"))
    report["pretrain_runs"] = drill(
        "pretrain", pretrain_command(data, "victim", hparams), os.path.join(models, "victim"),
        os.path.join(models, "victim"), args.kills, PRETRAIN_WRITES, rng, logs, reference)
    if reference.wait(timeout=1800) != 0:
        raise RuntimeError("the reference pre-training run failed; see logs/pretrain_reference.log")
    ref_dir, victim_dir = os.path.join(models, "reference"), os.path.join(models, "victim")
    report["pretrain_weights"] = compare_checkpoints(ref_dir, victim_dir)
    report["pretrain_eval"] = [
        compare_json(os.path.join(ref_dir, "results", name), os.path.join(victim_dir, "results",
                                                                          name))
        for name in ("unsup_results.json", "unsup_results_history.json")]
    report["leftovers"] = sorted(os.path.relpath(p, victim_dir) for p in glob.glob(
        os.path.join(glob.escape(victim_dir), "**", ".*tmp*"), recursive=True))
    return ref_dir


def _finetune_drill(args: argparse.Namespace, data: str, logs: str, rng: random.Random,
                    report: dict, ref_dir: str) -> None:
    """The killed fine-tuning run (2 trials) beside an uninterrupted one, compared."""
    print(f"fine-tuning: 2 trials of 128 steps from the reference model, checkpoint every 10; "
          f"{args.kills} kills", flush=True)
    models = os.path.join(data, "models")
    ft = finetune_hparams(ref_dir)
    ft_reference = subprocess.Popen(
        [sys.executable] + finetune_command(data, "ft_reference", ft), env=_env(),
        stdout=subprocess.DEVNULL, stderr=open(os.path.join(logs, "ft_reference.log"), "w"))
    report["finetune_runs"] = drill(
        "finetune", finetune_command(data, "ft_victim", ft),
        os.path.join(models, "ft_victim"),
        os.path.join(models, "ft_victim", "finetuning_models", "sst_model_*"), args.kills,
        FINETUNE_WRITES, rng, logs, ft_reference)
    if ft_reference.wait(timeout=1800) != 0:
        raise RuntimeError("the reference fine-tuning run failed; see logs/ft_reference.log")
    report["finetune_weights"] = [compare_checkpoints(
        os.path.join(models, "ft_reference", "finetuning_models", f"sst_model_{t}"),
        os.path.join(models, "ft_victim", "finetuning_models", f"sst_model_{t}"))
        for t in (1, 2)]
    report["finetune_eval"] = compare_json(
        os.path.join(models, "ft_reference", "results", "sst_results.json"),
        os.path.join(models, "ft_victim", "results", "sst_results.json"))


def _report(args: argparse.Namespace, work: str, report: dict, started: float) -> bool:
    """Writes kill_resume_report.json and prints the verdicts; True when all compared equal."""
    checks = [report["pretrain_weights"]] + report["pretrain_eval"]
    if not args.skip_finetune:
        checks += report["finetune_weights"] + [report["finetune_eval"]]
    kills_done = {k: f"{sum(r['killed'] for r in report.get(k, []))} SIGKILLs, "
                     f"{sum('preempted' in r for r in report.get(k, []))} SIGTERM/SIGINT stops "
                     "(each saved at its step)"
                  for k in ("pretrain_runs", "finetune_runs")}
    ok = all(not c["mismatched"] for c in checks)
    report["ok"] = ok
    report["seconds"] = round(time.time() - started)
    with open(os.path.join(work, "kill_resume_report.json"), "w", encoding="utf-8") as f:
        json.dump(report, f, indent=2)
    print(f"pre-training: {kills_done['pretrain_runs']}; weights "
          f"{_verdict(report['pretrain_weights'])}; eval " + ", ".join(
              f"{c['file']} {'equal' if not c['mismatched'] else c['mismatched'][:3]}"
              for c in report["pretrain_eval"]))
    if not args.skip_finetune:
        print(f"fine-tuning: {kills_done['finetune_runs']}; weights " + "; ".join(
            f"trial {t + 1} {_verdict(c)}" for t, c in enumerate(report["finetune_weights"]))
            + "; dev results " + ("equal" if not report["finetune_eval"]["mismatched"]
                                  else str(report["finetune_eval"]["mismatched"][:3])))
    if report["leftovers"]:
        print(f"temporary files left in the victim model dir: {report['leftovers']}")
    print(f"{'PASS' if ok else 'FAIL'} in {report['seconds']}s; report: "
          f"{os.path.join(work, 'kill_resume_report.json')}")
    return ok


def _verdict(result: dict) -> str:
    if result["mismatched"]:
        return f"DIFFER ({len(result['mismatched'])}: {result['mismatched'][:3]})"
    same = "bit-identical" if result["bit_identical"] else f"max |diff| {result['max_abs_diff']:.2g}"
    return f"equal at step {result['global_step']} ({result['tensors']} tensors, {same})"


if __name__ == "__main__":
    sys.exit(main())
