"""The README's first command: build data -> pre-train -> score a sentence -> fine-tune, on text every
Python installation has (the standard library's documentation), in a few minutes on a laptop CPU.

    python demo.py [--work-dir demo_run] [--pretrain-steps 600] [--quick]

Steps:
1. Corpus: the docstrings of the standard library modules and the language reference topics that
   ship with Python (pydoc_data), one document per module, one paragraph per line. Every fourth
   module is held out from pre-training and used only for the fine-tuning task.
2. A SentencePiece vocabulary trained on the corpus, then pre-training tfrecords
   (build_pretraining_dataset.py).
3. A tiny ELECTRA pre-trained with a progress bar (run_pretraining.py).
4. The discriminator scores a sentence in which a word was replaced by hand.
5. Fine-tuning on "word order": sentences from the held-out modules, half of them with two words
   swapped (label 0) and half untouched (label 1) -- a CoLA-style acceptability task derived from
   the corpus, scored with accuracy and Matthews correlation, against the same model trained from
   random initialisation.
"""
import contextlib
import importlib
import inspect
import io
import os
import pkgutil
import random
import re
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


def swap_two_words(sentence: str, rng: random.Random) -> str:
    words = sentence.split()
    for _ in range(10):
        i, j = sorted(rng.sample(range(len(words)), 2))
        if words[i].lower() != words[j].lower():
            words[i], words[j] = words[j], words[i]
            return " ".join(words)
    return ""


def write_corpus_and_task(work_dir: str, seed: int = 0) -> dict:
    """Writes corpus/*.txt (pre-training) and finetuning_data/cola/*.tsv (the word-order task)."""
    rng = random.Random(seed)
    documents = stdlib_documents()
    held_out = documents[::4]
    pretrain = [d for i, d in enumerate(documents) if i % 4]
    corpus_dir = os.path.join(work_dir, "corpus")
    os.makedirs(corpus_dir, exist_ok=True)
    for shard in range(4):
        with open(os.path.join(corpus_dir, f"stdlib_docs_{shard}.txt"), "w", encoding="utf-8") as f:
            for _, paragraphs in pretrain[shard::4]:
                f.write("\n".join(paragraphs) + "\n\n")
    sentences = sorted({s for _, ps in held_out for p in ps for s in split_sentences(p)})
    rng.shuffle(sentences)
    rows = []
    for sentence in sentences:
        if rng.random() < 0.5:
            swapped = swap_two_words(sentence, rng)
            if swapped:
                rows.append((0, swapped))
                continue
        rows.append((1, sentence))
    n = len(rows)
    splits = {"train": rows[: int(n * 0.7)], "dev": rows[int(n * 0.7): int(n * 0.85)],
              "test": rows[int(n * 0.85):]}
    task_dir = os.path.join(work_dir, "finetuning_data", "cola")
    os.makedirs(task_dir, exist_ok=True)
    for split in ("train", "dev"):
        with open(os.path.join(task_dir, f"{split}.tsv"), "w", encoding="utf-8") as f:
            for label, text in splits[split]:
                f.write(f"stdlib\t{label}\t\t{text}\n")  # CoLA layout: no header
    with open(os.path.join(task_dir, "test.tsv"), "w", encoding="utf-8") as f:
        f.write("index\tsentence\n")
        for i, (_, text) in enumerate(splits["test"]):
            f.write(f"{i}\t{text}\n")
    corpus_mb = sum(os.path.getsize(os.path.join(corpus_dir, p)) for p in os.listdir(corpus_dir)) / 1e6
    return dict(documents=len(documents), pretrain_documents=len(pretrain), corpus_mb=corpus_mb,
                task_sizes={k: len(v) for k, v in splits.items()})


if __name__ == "__main__":
    print(write_corpus_and_task(sys.argv[1] if len(sys.argv) > 1 else "demo_run"))
