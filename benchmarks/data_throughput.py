"""Throughput of pre-training data building: tokenizers alone and the whole build script.

Measures, on the first --num-files files of ../shared/data/pretrain_corpus:
  - tokenizer only (one process, fresh tokenizer so its word cache starts cold):
      reference  plain pure-Python BERT WordPiece (benchmarks/wordpiece_reference.py), the baseline
      wordpiece  model/tokenization.py FullTokenizer
      sentencepiece  SentencePieceTokenizer on a model trained on the same files
  - the whole build (build_dataset(): read, tokenize, build examples, serialize, write shards),
    each run in a fresh child process, with 1 and 2 worker processes; "reference-wordpiece" is the
    same pipeline with the baseline tokenizer swapped in. Child timings start after TensorFlow is
    imported in the child; 2-process runs include their workers' start-up (each imports TF).
Prints a markdown table and one JSON line per configuration (best of --repeats runs), plus the
machine and its load average. On a shared machine wall time depends on what else runs, so CPU
time (user + system, workers included) is reported too, and the speed-up over the reference is
computed from CPU time; scaling with processes can only be read from wall time on an idle machine.

  python benchmarks/data_throughput.py                 # ~1-2 minutes
  python benchmarks/data_throughput.py --num-files 16 --repeats 3
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

DATA = os.path.join(os.path.dirname(ROOT), "shared", "data")

from benchmarks.common import load_average, machine_summary  # noqa: E402


# ---------------------------------------------------------------------------------------------
# Child: one build, timed.

class _ReferenceAdapter:
    """The baseline tokenizer with the attributes the example builder needs."""

    def __init__(self, vocab_file: str):
        import wordpiece_reference
        self._ref = wordpiece_reference.ReferenceWordpiece(vocab_file)
        self.vocab = self._ref.vocab
        self.cls_id, self.sep_id = self.vocab["[CLS]"], self.vocab["[SEP]"]
        self.encode = self._ref.encode


def child_build(kind: str, processes: int, corpus_dir: str, vocab: str, output_dir: str) -> dict:
    import tensorflow  # noqa: F401  (imported before the clock starts)
    from pretrain.builder import dataset_builder, example_builder

    settings = dict(corpus_dir=corpus_dir, output_dir=output_dir, num_processes=processes,
                    num_out_files=8, eval_fraction=0.0, show_progress=False,
                    log=lambda m: print(m, file=sys.stderr))
    if kind == "sentencepiece":
        # The benchmark's model is trained on cased text.
        cfg = dataset_builder.BuildConfig(spm_model=vocab, do_lower_case=False, **settings)
    else:
        cfg = dataset_builder.BuildConfig(vocab_file=vocab, **settings)
    if kind == "reference-wordpiece":
        if processes != 1:
            raise ValueError("the reference tokenizer is only swapped in for one process")
        spec = example_builder.TokenizerSpec(vocab, None, True, None)
        example_builder._TOKENIZERS[spec] = _ReferenceAdapter(vocab)  # pylint: disable=protected-access
    cpu_start = _cpu_seconds()
    start = time.perf_counter()
    metadata = dataset_builder.build_dataset(cfg)
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "cpu_seconds": _cpu_seconds() - cpu_start,
            "examples": metadata["num_examples"], "tokens": metadata["num_tokens"]}


def _cpu_seconds() -> float:
    """User + system time of this process and its finished children (pool workers)."""
    import resource
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


# ---------------------------------------------------------------------------------------------
# Parent.

def time_tokenizer(make, lines: list[str], repeats: int) -> dict:
    best = None
    for _ in range(repeats):
        tokenizer = make()  # fresh: cold word cache, as in a real build
        cpu, start = time.process_time(), time.perf_counter()
        tokens = sum(len(tokenizer.encode(line)) for line in lines)
        result = {"seconds": time.perf_counter() - start, "cpu_seconds": time.process_time() - cpu,
                  "tokens": tokens, "examples": None}
        if best is None or result["cpu_seconds"] < best["cpu_seconds"]:
            best = result
    return best


def run_child(kind: str, processes: int, corpus_dir: str, vocab: str, work: str) -> dict:
    out = tempfile.mkdtemp(dir=work)
    try:
        proc = subprocess.run(
            [sys.executable, os.path.abspath(__file__), "--child", kind, str(processes),
             corpus_dir, vocab, out], capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"child build {kind}/{processes} failed:\n{proc.stderr[-3000:]}")
        return json.loads(proc.stdout.strip().splitlines()[-1])
    finally:
        shutil.rmtree(out, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--num-files", type=int, default=8, help="corpus files to use (of 64)")
    parser.add_argument("--repeats", type=int, default=2, help="runs per configuration; best kept")
    parser.add_argument("--spm-vocab-size", type=int, default=8000)
    parser.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        kind, processes, corpus_dir, vocab, out = args.child
        print(json.dumps(child_build(kind, int(processes), corpus_dir, vocab, out)))
        return

    from model import tokenization

    machine = _print_machine()
    vocab = os.path.join(DATA, "vocab", "bert-uncased-vocab.txt")
    work, corpus_dir, lines, megabytes = _link_corpus(args.num_files)
    start = time.perf_counter()
    spm_model = tokenization.train_sentencepiece(
        (line for line in lines), os.path.join(work, "spm"), args.spm_vocab_size)
    print(f"# SentencePiece model ({args.spm_vocab_size} pieces) trained in "
          f"{time.perf_counter() - start:.1f} s")
    rows = _time_tokenizers(vocab, spm_model, lines, args.repeats, megabytes)
    rows += _time_builds(vocab, spm_model, corpus_dir, work, args.repeats, megabytes)
    shutil.rmtree(work, ignore_errors=True)
    baseline = {r["group"]: r["cpu_seconds"] for r in rows
                if r["config"] in ("reference", "reference-wordpiece")}
    for r in rows:
        r["cpu_speedup_vs_reference"] = round(baseline[r["group"]] / r["cpu_seconds"], 2)
    _print_rows(rows, machine)


def _print_machine() -> dict:
    machine = machine_summary()
    load_start = load_average()
    print(f"# machine: {machine['nproc']} cores, {machine['cpu']}, flags {' '.join(machine['cpu_flags'])}; "
          f"python {machine['python']}; {machine['date']}; load average at start {load_start:.2f}")
    if load_start > 0.5:
        print(f"# warning: the machine is not idle (load {load_start:.2f}); figures are pessimistic")
    return machine


def _link_corpus(num_files: int) -> tuple[str, str, list[str], float]:
    """(work dir, a corpus dir linking the first `num_files` files, their lines, their MB)."""
    corpus_src = os.path.join(DATA, "pretrain_corpus")
    names = sorted(os.listdir(corpus_src))[:num_files]
    work = tempfile.mkdtemp(prefix="data_throughput_")
    corpus_dir = os.path.join(work, "corpus")
    os.makedirs(corpus_dir)
    for name in names:  # a link farm: the build reads exactly these files
        os.symlink(os.path.join(corpus_src, name), os.path.join(corpus_dir, name))
    lines = []
    for name in names:
        with open(os.path.join(corpus_src, name), encoding="utf-8") as f:
            lines.extend(f)
    megabytes = sum(os.path.getsize(os.path.join(corpus_src, n)) for n in names) / 1e6
    print(f"# corpus: {len(names)} files of ../shared/data/pretrain_corpus, {megabytes:.1f} MB, "
          f"{len(lines):,} lines")
    return work, corpus_dir, lines, megabytes


def _row(group, config, processes, result, load_before, megabytes) -> dict:
    seconds, cpu, examples = result["seconds"], result["cpu_seconds"], result["examples"]
    return {"group": group, "config": config, "processes": processes,
            "mb": round(megabytes, 2), "seconds": round(seconds, 3),
            "cpu_seconds": round(cpu, 3),
            "mb_per_s": round(megabytes / seconds, 3),
            "mb_per_s_per_process": round(megabytes / seconds / processes, 3),
            "mb_per_cpu_s": round(megabytes / cpu, 3),
            "examples": examples,
            "examples_per_s": round(examples / seconds, 1) if examples else None,
            "tokens": result["tokens"], "load_before": load_before,
            "load_after": load_average()}


def _time_tokenizers(vocab: str, spm_model: str, lines: list[str], repeats: int,
                     megabytes: float) -> list[dict]:
    from model import tokenization
    import wordpiece_reference

    tokenizers = [
        ("reference", lambda: wordpiece_reference.ReferenceWordpiece(vocab)),
        ("wordpiece", lambda: tokenization.FullTokenizer(vocab)),
        ("sentencepiece", lambda: tokenization.SentencePieceTokenizer(spm_model)),
    ]
    rows = []
    for config, make in tokenizers:
        load = load_average()
        rows.append(_row("tokenize", config, 1, time_tokenizer(make, lines, repeats), load,
                         megabytes))
    return rows


def _time_builds(vocab: str, spm_model: str, corpus_dir: str, work: str, repeats: int,
                 megabytes: float) -> list[dict]:
    builds = [("reference-wordpiece", 1, vocab), ("wordpiece", 1, vocab), ("wordpiece", 2, vocab),
              ("sentencepiece", 1, spm_model), ("sentencepiece", 2, spm_model)]
    best: dict[tuple, dict] = {}
    loads: dict[tuple, float] = {}
    for _ in range(repeats):  # interleaved, so a burst of load hits all configurations
        for kind, processes, vocab_path in builds:
            load = load_average()
            result = run_child(kind, processes, corpus_dir, vocab_path, work)
            key = (kind, processes)
            # Best by CPU time for one process, by wall time (what scaling is about) for two.
            measure = "cpu_seconds" if processes == 1 else "seconds"
            if key not in best or result[measure] < best[key][measure]:
                best[key], loads[key] = result, load
    return [_row("build", kind, processes, result, loads[(kind, processes)], megabytes)
            for (kind, processes), result in best.items()]


def _print_rows(rows: list[dict], machine: dict) -> None:
    print()
    print("| what | configuration | processes | wall s | CPU s | MB/s (wall) | MB/s per process | "
          "MB per CPU-s | examples/s (wall) | x reference (CPU) | load before/after |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        examples = f"{r['examples_per_s']:,.0f}" if r["examples_per_s"] else "-"
        print(f"| {r['group']} | {r['config']} | {r['processes']} | {r['seconds']:.2f} | "
              f"{r['cpu_seconds']:.2f} | {r['mb_per_s']:.2f} | {r['mb_per_s_per_process']:.2f} | "
              f"{r['mb_per_cpu_s']:.2f} | {examples} | {r['cpu_speedup_vs_reference']:.1f} | "
              f"{r['load_before']:.2f}/{r['load_after']:.2f} |")
    print()
    for r in rows:
        print(json.dumps({**r, "machine": machine}))


if __name__ == "__main__":
    main()
