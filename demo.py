"""The README's first command: build data -> pre-train -> score a sentence -> fine-tune, on text every
Python installation has (the standard library's documentation), in a few minutes on a laptop CPU.

    python demo.py [--work-dir demo_run] [--pretrain-steps 1000] [--finetune-epochs 3] [--vocab-size 4000]

Steps:
1. Corpus: the docstrings of the standard library modules and the language reference topics that
   ship with Python (pydoc_data), one document per module, one paragraph per line. Every fourth
   module and every second reference topic are held out from pre-training and used only for the fine-tuning task.
2. A SentencePiece vocabulary trained on the corpus, then pre-training tfrecords
   (build_pretraining_dataset.py).
3. A tiny ELECTRA pre-trained with a progress bar (run_pretraining.py).
4. The discriminator scores a sentence in which a word was replaced by hand.
5. A linear probe on frozen features (tools/probe.py) of the pre-trained encoder and of a random
   one: how much of the labelled task below the features already hold, without fine-tuning.
6. Fine-tuning on "reference or library?": sentences of the held-out documents, labelled by
   whether they come from the language reference (1) or from a module's docstrings (0), balanced,
   in the SST-2 file layout; scored with accuracy against the same model trained from random
   initialisation.
"""
import argparse
import contextlib
import importlib
import inspect
import io
import json
import logging
import os
import pkgutil
import random
import re
import subprocess
import sys
import warnings

# Modules with side effects on import (a browser, a poem, a GUI) or nothing to read.
SKIP_MODULES = {"antigravity", "this", "idlelib", "tkinter", "turtle", "turtledemo", "__main__",
                "lib2to3", "ensurepip", "venv", "pydoc_data", "test", "msvcrt", "winreg",
                "winsound", "nt", "sre_compile", "sre_parse", "sre_constants", "asyncio.__main__",
                "json.tool", "sqlite3.__main__", "venv.__main__", "ensurepip.__main__"}


def _paragraphs(docstring: str) -> list[str]:
    """Re-flows a hard-wrapped docstring into one line per paragraph; drops code and tables."""
    result = []
    for block in re.split(r"\n\s*\n", docstring):
        lines = [ln.strip() for ln in block.splitlines()]
        if not lines or any(ln.startswith((">>>", "...", "$ ", "+--", "|", "==")) for ln in lines):
            continue
        text = " ".join(ln for ln in lines if ln)
        if len(text.split()) >= 4 and not set(text) <= set("*=-~^ "):
            result.append(text)
    return result


def _module_docs(name: str) -> list[str]:
    warnings.simplefilter("ignore")
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            module = importlib.import_module(name)
    except Exception:  # noqa: BLE001 -- platform-specific modules fail to import; skip them
        return []
    docs = [inspect.getdoc(module) or ""]
    for attr, obj in sorted(vars(module).items()):
        if attr.startswith("_") or getattr(obj, "__module__", None) != name:
            continue
        if inspect.isclass(obj) or inspect.isroutine(obj):
            docs.append(inspect.getdoc(obj) or "")
        if inspect.isclass(obj):
            docs.extend(inspect.getdoc(m) or "" for n, m in sorted(vars(obj).items())
                        if not n.startswith("_") and inspect.isroutine(m))
    return [p for d in docs if d for p in _paragraphs(d)]


def _submodules(package: str) -> list[str]:
    """Public submodules of a standard-library package (email.message, json.decoder, ...)."""
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            module = importlib.import_module(package)
    except Exception:  # noqa: BLE001
        return []
    if not hasattr(module, "__path__"):
        return []
    return [f"{package}.{info.name}" for info in pkgutil.iter_modules(module.__path__)
            if not info.name.startswith("_") and "test" not in info.name
            and f"{package}.{info.name}" not in SKIP_MODULES]


def stdlib_documents() -> list[tuple[str, list[str]]]:
    """(name, paragraphs) per standard-library module and per language-reference topic."""
    names = []
    for name in sorted(sys.stdlib_module_names):
        if name.startswith("_") or name in SKIP_MODULES:
            continue
        names.append(name)
        names.extend(_submodules(name))
    documents = []
    for name in names:
        paragraphs = _module_docs(name)
        if paragraphs:
            documents.append((name, paragraphs))
    from pydoc_data import topics  # the language reference, shipped for help()
    for key, text in sorted(topics.topics.items()):
        paragraphs = _paragraphs(text)
        if paragraphs:
            documents.append((f"topic:{key}", paragraphs))
    return documents


def split_sentences(paragraph: str) -> list[str]:
    return [s for s in re.split(r"(?<=[.!?])\s+(?=[A-Z])", paragraph) if 6 <= len(s.split()) <= 40]


def _write_if_changed(path: str, text: str) -> None:
    """A re-run writes the same text: leaving the file (and its modification time) as it is lets
    the data build resume instead of refusing a corpus that looks edited."""
    if os.path.isfile(path):
        with open(path, encoding="utf-8") as f:
            if f.read() == text:
                return
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def write_corpus_and_task(work_dir: str, seed: int = 0) -> dict:
    """Writes corpus/*.txt (pre-training) and finetuning_data/sst/*.tsv (the labelled task).

    The task: does a sentence come from the language reference (label 1) or from a library
    module's docstrings (label 0)? Sentences come only from the held-out documents, the classes
    are balanced by subsampling the larger one, and the split is 70/15/15.
    """
    rng = random.Random(seed)
    documents = stdlib_documents()
    # Every fourth module and every second reference topic (the rarer class) are held out.
    is_held_out = [i % (2 if name.startswith("topic:") else 4) == 0
                   for i, (name, _) in enumerate(documents)]
    held_out = [d for d, out in zip(documents, is_held_out) if out]
    pretrain = [d for d, out in zip(documents, is_held_out) if not out]
    corpus_dir = os.path.join(work_dir, "corpus")
    os.makedirs(corpus_dir, exist_ok=True)
    for shard in range(4):
        _write_if_changed(os.path.join(corpus_dir, f"stdlib_docs_{shard}.txt"), "".join(
            "\n".join(paragraphs) + "\n\n" for _, paragraphs in pretrain[shard::4]))
    by_label = {0: set(), 1: set()}
    for name, paragraphs in held_out:
        label = 1 if name.startswith("topic:") else 0
        by_label[label].update(s for p in paragraphs for s in split_sentences(p))
    per_class = min(len(v) for v in by_label.values())
    rows = [(label, sentence) for label, sentences in by_label.items()
            for sentence in rng.sample(sorted(sentences), per_class)]
    rng.shuffle(rows)
    n = len(rows)
    splits = {"train": rows[: int(n * 0.7)], "dev": rows[int(n * 0.7): int(n * 0.85)],
              "test": rows[int(n * 0.85):]}
    task_dir = os.path.join(work_dir, "finetuning_data", "sst")
    os.makedirs(task_dir, exist_ok=True)
    for split in ("train", "dev"):  # the SST-2 layout of GLUE
        _write_if_changed(os.path.join(task_dir, f"{split}.tsv"), "sentence\tlabel\n" + "".join(
            f"{text}\t{label}\n" for label, text in splits[split]))
    _write_if_changed(os.path.join(task_dir, "test.tsv"), "index\tsentence\n" + "".join(
        f"{i}\t{text}\n" for i, (_, text) in enumerate(splits["test"])))
    corpus_mb = sum(os.path.getsize(os.path.join(corpus_dir, p)) for p in os.listdir(corpus_dir)) / 1e6
    return dict(documents=len(documents), pretrain_documents=len(pretrain), corpus_mb=corpus_mb,
                task_sizes={k: len(v) for k, v in splits.items()})


def _run(step: str, args: list[str], verbose: bool = False) -> None:
    """Runs one of the project's commands, stopping the demo if it fails.

    In this process, as the command's own `main(argv)`: the same messages and exit status as the
    command line printed, without each command's start-up (importing TensorFlow again took about
    4 s a step on a 2-core host)."""
    args = args + ["--verbose"] if verbose else args
    print(f"\n== {step}\n$ python {' '.join(args)}", flush=True)
    script, argv = args[0], args[1:]
    command = importlib.import_module(script[:-len(".py")].replace("/", "."))
    # Each command configures logging as in its own process (its own line format).
    for handler in logging.root.handlers[:]:
        logging.root.removeHandler(handler)
    saved_argv, sys.argv = sys.argv, [script] + argv
    try:
        status = command.main(argv)
    except SystemExit as stop:  # argparse: --help (None) or a usage error (2)
        status = 0 if stop.code is None else stop.code if isinstance(stop.code, int) else 1
    finally:
        sys.argv = saved_argv
        sys.stdout.flush()
        sys.stderr.flush()
    from util import preemption  # loaded with the command (it imports TensorFlow)
    if status == preemption.EXIT_PREEMPTED:
        sys.exit(f"demo: stopped by a signal during step '{step}', its state saved; run the "
                 "same demo command again to continue")
    if status:
        sys.exit(f"demo: step '{step}' failed: the command exited with status {status}; "
                 "see the messages above")


def pretrain_hparams(spm_model: str, vocab_size: int, steps: int, compute_dtype: str) -> dict:
    """The demo's pre-training recipe (tests/test_health_runs.py trains its first steps)."""
    tiny = {"hidden_size": 128, "num_hidden_layers": 3, "num_attention_heads": 2,
            "intermediate_size": 512}
    return {
        "model_size": "small", "model_hparam_overrides": tiny, "embedding_size": 64,
        "generator_hidden_size": 0.25, "vocab_file": spm_model, "vocab_size": vocab_size,
        "train_batch_size": 32, "max_seq_length": 128,
        "num_train_steps": steps, "num_warmup_steps": steps // 10,
        "learning_rate": 1e-3, "adam_bias_correction": True, "lr_decay_after_warmup": True,
        "save_checkpoints_steps": max(100, steps // 4), "iterations_per_loop": 50,
        "do_eval": True, "num_eval_steps": 20, "eval_batch_size": 32,
        "compute_dtype": compute_dtype}


def _pick_demo_sentence(work_dir: str) -> tuple[str, str]:
    """A held-out dev sentence and the same sentence with one word replaced by hand."""
    with open(os.path.join(work_dir, "finetuning_data", "sst", "dev.tsv"), encoding="utf-8") as f:
        originals = [line.split("\t")[0] for line in list(f)[1:]]
    sentence = min((s for s in originals if 8 <= len(s.split()) <= 14), key=len)
    words = sentence.split()
    position = len(words) // 2
    # A frequent word of the corpus, so that it is one piece of the vocabulary.
    words[position] = "string" if words[position].lower() != "string" else "file"
    return sentence, " ".join(words)


def _scores(results_json: str) -> dict:
    with open(results_json, encoding="utf-8") as f:
        results = json.load(f)
    return results


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Examples:\n  python demo.py\n  python demo.py --work-dir /tmp/electra_demo "
               "--pretrain-steps 300   # a shorter run")
    parser.add_argument("--work-dir", default="demo_run",
                        help="where the corpus, data and models go (default demo_run/; a finished "
                             "step is reused when the demo is run again). Example: --work-dir /tmp/d")
    parser.add_argument("--pretrain-steps", type=int, default=1000,
                        help="pre-training steps (default 1000, 2-3 minutes on 2 idle cores). "
                             "Example: --pretrain-steps 300")
    parser.add_argument("--finetune-epochs", type=float, default=3.0,
                        help="fine-tuning epochs on the reference-or-library task (default 3)")
    parser.add_argument("--vocab-size", type=int, default=4000,
                        help="SentencePiece vocabulary trained on the corpus (default 4000)")
    parser.add_argument("--verbose", action="store_true",
                        help="pass --verbose to every step: TensorFlow's start-up lines and "
                             "warnings, whole configs")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    work = os.path.abspath(args.work_dir)
    os.makedirs(work, exist_ok=True)
    spm_model, hparams = _pretrain(args, work)
    model_dir = os.path.join(work, "models", "demo")
    probe_json = _score_and_probe(work, model_dir, args.verbose)
    _finetune_twice(args, work, model_dir, spm_model, hparams)
    _print_scores(probe_json, model_dir, args.finetune_epochs)
    print(f"\nEverything is in {work}: models/demo (checkpoints, TensorBoard logs, results/).")
    return 0


def _pretrain(args: argparse.Namespace, work: str) -> tuple[str, dict]:
    """Steps 1-3: the corpus, its tfrecords and the pre-trained model; (spm.model, hparams)."""
    print(f"== 1/6 corpus: the standard library's documentation -> {work}/corpus", flush=True)
    # In a child process: importing hundreds of stdlib modules should not touch the demo's own.
    info = subprocess.run([sys.executable, os.path.abspath(__file__), "--write-corpus", work],
                          check=True, capture_output=True, text=True).stdout.strip()
    print(info)

    tfrecords = os.path.join(work, "pretrain_tfrecords")
    _run("2/6 pre-training data (a SentencePiece vocabulary trained on the corpus first)",
         ["build_pretraining_dataset.py", "--corpus-dir", os.path.join(work, "corpus"),
          "--vocab-size", str(args.vocab_size), "--output-dir", tfrecords,
          "--max-seq-length", "128"], args.verbose)
    spm_model = os.path.join(tfrecords, "spm.model")
    hparams = pretrain_hparams(spm_model, args.vocab_size, args.pretrain_steps,
                               "bfloat16" if _has_bf16() else "float32")
    _run("3/6 pre-training a tiny ELECTRA (hidden 128, 3 layers, generator 1/4 width)",
         ["run_pretraining.py", "--data-dir", work, "--model-name", "demo",
          "--hparams", json.dumps(hparams)], args.verbose)
    print(_health_line(os.path.join(work, "models", "demo")), flush=True)
    return spm_model, hparams


def _score_and_probe(work: str, model_dir: str, verbose: bool) -> str:
    """Steps 4-5: a hand-replaced word scored, and the linear probes; the probes' json."""
    original, replaced = _pick_demo_sentence(work)
    print(f"\n== 4/6 the discriminator reads a sentence in which one word was replaced by hand"
          f"\n   original: {original}\n   replaced: {replaced}", flush=True)
    _run("scoring", ["score_text.py", "--model-dir", model_dir, replaced], verbose)

    task_dir = os.path.join(work, "finetuning_data", "sst")
    probe_json = os.path.join(model_dir, "results", "probe_results.json")
    _run("5/6 a linear probe on frozen features: the reference-or-library task, read off the "
         "pre-trained encoder and off a random one of the same shape",
         ["tools/probe.py", "--model-dir", model_dir, "--tasks", "sst", "--sst", task_dir,
          "--train-size", "100000", "--random-seeds", "3", "--json", probe_json], verbose)
    return probe_json


def _finetune_twice(args: argparse.Namespace, work: str, model_dir: str, spm_model: str,
                    hparams: dict) -> None:
    """Step 6: fine-tuning from the pre-trained model, then from random initialisation."""
    finetune = {"task_names": ["sst"], "vocab_file": spm_model, "vocab_size": args.vocab_size,
                "max_seq_length": 64, "num_train_epochs": args.finetune_epochs,
                "learning_rate": 1e-3, "layerwise_lr_decay": 0.8, "adam_bias_correction": True,
                "lr_decay_after_warmup": True, "train_batch_size": 32}
    _run("6/6 fine-tuning on the reference-or-library task (from the pre-trained model)",
         ["run_finetuning.py", "--data-dir", work, "--model-name", "demo",
          "--hparams", json.dumps(finetune)], args.verbose)
    scratch = dict(finetune, init_checkpoint="", embedding_size=hparams["embedding_size"],
                   model_hparam_overrides=hparams["model_hparam_overrides"],
                   model_dir=os.path.join(model_dir, "finetuning_models", "sst_scratch_model"),
                   results_txt=os.path.join(model_dir, "results", "sst_scratch_results.txt"),
                   results_json=os.path.join(model_dir, "results", "sst_scratch_results.json"))
    _run("the same fine-tuning from random initialisation, for comparison",
         ["run_finetuning.py", "--data-dir", work, "--model-name", "demo",
          "--hparams", json.dumps(scratch)], args.verbose)


def _print_scores(probe_json: str, model_dir: str, finetune_epochs: float) -> None:
    print("\n== scores on the reference-or-library task's dev set (accuracy)")
    probes = _scores(probe_json)
    print(f"   {'':24s} {'linear probe':>13s} {'fine-tuned':>11s}")
    for label, column, path in (("pre-trained ELECTRA", "pretrained", "sst_results.json"),
                                ("random initialisation", "random", "sst_scratch_results.json")):
        probe = 100 * probes[column]["sst/mean"]
        print(f"   {label:24s} {probe:13.1f} {_summary(os.path.join(model_dir, 'results', path)):>11s}")
    spread = [100 * r["sst/mean"] for r in probes["random_seeds"]]
    print(f"   linear probe: frozen features (mean over layers, mean-pooled), a softmax classifier "
          f"trained on the task's\n   training sentences; random initialisation is the mean of "
          f"{len(spread)} random encoders ({min(spread):.1f}-{max(spread):.1f}).\n"
          f"   fine-tuned: the whole network trained on the task ({finetune_epochs:g} epochs).")


def _health_line(model_dir: str) -> str:
    """The pre-training run's health at its final eval (pretrain/health.py), with what to try."""
    from pretrain import health
    active = _scores(os.path.join(model_dir, "results", "unsup_results.json")).get("health", {})
    settings = os.path.join(model_dir, "pretrain_config.json")  # the advice fits the run
    run = health.RunFacts.from_settings(_scores(settings)) if os.path.exists(settings) else None
    lines = [f"   health of the pre-training run: {health.line(active)} "
             f"(python tools/inspect_run.py {model_dir})"]
    lines += [f"   {health.describe(name, step, run)}"
              for name, step in sorted(active.items(), key=lambda item: item[1])]
    return "\n".join(lines)


def _summary(results_json: str) -> str:
    results = _scores(results_json)
    median = results.get("median", results)
    task = median.get("sst", median)
    return f"{task['accuracy']:.1f}"


def _has_bf16() -> bool:
    """bfloat16 compute pays off on CPUs with AVX-512 bf16 (and on GPUs/TPUs)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            return "avx512_bf16" in f.read()
    except OSError:
        return False


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--write-corpus":
        summary = write_corpus_and_task(sys.argv[2])
        print(f"{summary['documents']} documents ({summary['pretrain_documents']} for pre-training, "
              f"{summary['corpus_mb']:.1f} MB); reference-or-library task sizes {summary['task_sizes']}")
        sys.exit(0)
    status = main()
    # As the training commands end: everything is written and closed; skip the interpreter's
    # teardown of TensorFlow (a second or two).
    from util import preemption
    preemption.exit_now(status)
