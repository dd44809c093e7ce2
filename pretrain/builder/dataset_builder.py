"""Planning and running a pre-training data build: shards, held-out split, resume, metadata.

The plan is a pure function of the corpus (file names and sizes), the flags and the seed:
  1. the corpus is cut into units (whole files; large plain files in ranges that end after a
     blank line), shuffled with the seed;
  2. units are dealt to G = min(num_out_files, #units) groups, each to the group with the least
     text so far; group g fills shards g, g+G, g+2G, ... (just shard g when G = num_out_files);
  3. the last round(eval_fraction * G) groups (at least one when G >= 2) are held out: their
     shards are listed in metadata.json under "eval_files". Held-out shards are built from whole
     files or ranges of documents that no training shard sees.
Groups run in any order on any number of processes (example_builder.build_group); a shard is
written under a temporary name and renamed when complete, so a re-run with the same settings
skips complete shards, and a changed setting is refused instead of mixing two datasets.
"""
import dataclasses
import datetime
import hashlib
import math
import os
import random
import re
import shutil
import sys
import tempfile
import time
from typing import Callable, Iterator

from model import tokenization
from pretrain import pretrain_data
from pretrain.builder import corpus, example_builder
from util import fs, io_utils, training_utils, workers

TARGET_SHARD_BYTES = 32 << 20   # auto shard count: about this much text per shard ...
MIN_SHARD_BYTES = 64 << 10      # ... but never shards smaller than this
MIN_CHUNK_BYTES = 64 << 10      # large plain files are cut into ranges of this size or more
MAX_CHUNK_BYTES = 64 << 20
SPM_MODEL_NAME = "spm.model"
SPM_MAX_SENTENCES = 2_000_000


class BuildError(ValueError):
    """A build that cannot proceed: bad settings, an output dir of another build, no output."""


@dataclasses.dataclass
class BuildConfig:
    """Settings of build_pretraining_dataset.py (see its --help for each)."""
    corpus_dir: str
    output_dir: str
    vocab_file: str | None = None
    spm_model: str | None = None
    vocab_size: int | None = None          # train a SentencePiece model of this size
    do_lower_case: bool = True             # as the official script and configure_*.py
    strip_accents: bool | None = None      # None: follow do_lower_case (WordPiece only)
    max_seq_length: int = 128
    num_processes: int = 1
    blanks_separate_docs: bool | None = None  # None: yes in text files, not in archive members
    num_out_files: int | None = None       # None: chosen from the corpus size
    eval_fraction: float = 0.02
    seed: int = 12345
    skip_bad_files: bool = False
    official_truncation: bool = False      # drop what does not fit, as the official script
    show_progress: bool = True
    log: Callable[[str], None] = print

    def validate(self) -> None:
        fs.check_spellings({"--corpus-dir": self.corpus_dir, "--output-dir": self.output_dir,
                            "--vocab-file": self.vocab_file, "--spm-model": self.spm_model})
        if fs.relation(self.output_dir, self.corpus_dir) in ("same", "inside"):
            raise BuildError(f"--output-dir {self.output_dir} is inside --corpus-dir "
                             f"{self.corpus_dir}; its shards would be read as text by the next "
                             "run. Choose another place")
        sources = [n for n, v in (("--vocab-file", self.vocab_file), ("--spm-model", self.spm_model),
                                  ("--vocab-size", self.vocab_size)) if v is not None]
        if len(sources) != 1:
            raise BuildError(
                "give exactly one of --vocab-file (WordPiece vocab.txt), --spm-model "
                "(SentencePiece model) or --vocab-size N (train SentencePiece on the corpus)"
                + (f"; got {' and '.join(sources)}" if sources else ""))
        if self.max_seq_length < example_builder.MIN_TARGET_LENGTH:
            raise BuildError(f"--max-seq-length must be at least {example_builder.MIN_TARGET_LENGTH}, "
                             f"got {self.max_seq_length}")
        if self.num_processes < 1:
            raise BuildError(f"--num-processes must be at least 1, got {self.num_processes}")
        if self.num_out_files is not None and self.num_out_files < 1:
            raise BuildError(f"--num-out-files must be at least 1, got {self.num_out_files}")
        if not 0.0 <= self.eval_fraction <= 0.5:
            raise BuildError(f"--eval-fraction must be in [0, 0.5], got {self.eval_fraction}")
        if self.vocab_size is not None and self.vocab_size < 16:
            raise BuildError(f"--vocab-size must be at least 16, got {self.vocab_size}")
        if self.strip_accents is not None and self.vocab_file is None:
            raise BuildError("--strip-accents/--no-strip-accents apply to WordPiece (--vocab-file) "
                             "only; SentencePiece models keep accents as trained")

    @property
    def kind(self) -> str:
        return "wordpiece" if self.vocab_file is not None else "sentencepiece"

    @property
    def lower_case(self) -> bool:
        return self.do_lower_case


@dataclasses.dataclass
class Plan:
    num_shards: int
    groups: list[list[corpus.Unit]]
    eval_groups: set[int]

    def shards_of(self, group: int) -> tuple[int, ...]:
        return tuple(range(group, self.num_shards, len(self.groups)))

    @property
    def eval_shards(self) -> list[int]:
        return sorted(s for g in self.eval_groups for s in self.shards_of(g))


# ---------------------------------------------------------------------------------------------
# Planning.

def auto_num_out_files(total_bytes: float, num_processes: int, eval_fraction: float) -> int:
    """About 32 MB of text per shard, at least 4 per process (load balance) and enough that one
    held-out shard is about eval_fraction of the data, but no shard under ~64 KB of text."""
    n = math.ceil(total_bytes / TARGET_SHARD_BYTES)
    n = max(n, 4 * num_processes)
    if eval_fraction > 0:
        n = max(n, math.ceil(1 / eval_fraction - 1e-9))
    return max(1, min(n, int(total_bytes // MIN_SHARD_BYTES)))


def make_plan(files: list[corpus.InputFile], num_shards: int, eval_fraction: float, seed: int,
              blanks_separate_docs: bool | None) -> Plan:
    """Units -> groups -> shards, deterministically (see the module docstring)."""
    total = sum(f.weight for f in files)
    chunk = int(min(MAX_CHUNK_BYTES, max(MIN_CHUNK_BYTES, total / (2 * num_shards))))
    units = corpus.split_into_units(files, chunk, blanks_separate_docs is not False)
    units = [u for u in units if u.end > u.start]
    random.Random(f"{seed}:units").shuffle(units)
    num_groups = max(1, min(num_shards, len(units)))
    groups: list[list[corpus.Unit]] = [[] for _ in range(num_groups)]
    loads = [0.0] * num_groups
    for unit in units:
        g = min(range(num_groups), key=lambda i: (loads[i], i))
        groups[g].append(unit)
        loads[g] += unit.weight
    eval_groups: set[int] = set()
    if eval_fraction > 0 and num_groups >= 2:
        n_eval = min(num_groups - 1, max(1, round(eval_fraction * num_groups)))
        eval_groups = set(range(num_groups - n_eval, num_groups))
    return Plan(num_shards, groups, eval_groups)


def corpus_fingerprint(files: list[corpus.InputFile]) -> str:
    """Each file's path, size and modification time: an edited file (even of the same size)
    refuses a resume instead of mixing shards of two corpora. Not the content: hashing a corpus
    of tens of GB would cost a resume a full extra read."""
    digest = hashlib.sha256()
    for f in files:
        digest.update(f"{f.relpath}\t{f.size}\t{fs.getmtime(f.path)!r}\n".encode())
    return digest.hexdigest()


# ---------------------------------------------------------------------------------------------
# The output directory: what is there, and does it belong to this configuration?

_SHARD_RE = re.compile(re.escape(pretrain_data.SHARD_PREFIX) + r"-(\d+)-of-(\d+)$")
_TEMP_RE = re.compile(r"^\." + re.escape(pretrain_data.SHARD_PREFIX) + r"-\d+-of-\d+\.tmp-\d+$")


def _config_path(output_dir: str) -> str:
    return os.path.join(output_dir, example_builder.STATE_DIR, "config.json")


def _existing_config(output_dir: str) -> dict | None:
    path = _config_path(output_dir)
    if not fs.exists(path):
        return None
    return io_utils.read_json(path)


def _check_output_dir(output_dir: str, config: dict, existing: dict | None) -> None:
    """Refuses a directory holding shards of another build (or of an unknown one)."""
    names = fs.listdir(output_dir) if fs.isdir(output_dir) else []
    shards = [n for n in names if _SHARD_RE.match(n)]
    if existing is None:
        if shards or pretrain_data.METADATA_FILE in names:
            raise BuildError(
                f"--output-dir {output_dir} already holds {len(shards)} pre-training shards but no "
                f"build record ({example_builder.STATE_DIR}/config.json), so they may come from a "
                f"different vocabulary or settings; choose an empty --output-dir or delete them")
        return
    # Builds recorded before the key existed truncated as the official script.
    existing = dict({"official_truncation": True}, **existing)
    differences = [f"{key}: {existing.get(key)!r} before, {config.get(key)!r} now"
                   for key in sorted(set(config) | set(existing))
                   if existing.get(key) != config.get(key)]
    if differences and (shards or pretrain_data.METADATA_FILE in names):
        raise BuildError(
            f"--output-dir {output_dir} holds shards built with other settings ("
            + "; ".join(differences) + "); resuming would mix two datasets. Use a new "
            "--output-dir, delete the old shards, or repeat the original settings")
    foreign = [n for n in shards
               if int(_SHARD_RE.match(n).group(2)) != config["num_out_files"]]
    if foreign:
        raise BuildError(f"--output-dir {output_dir} holds shards of another build: "
                         f"{', '.join(sorted(foreign)[:3])}; delete them or use a new --output-dir")


def _remove_stale_temp_files(output_dir: str) -> None:
    for name in fs.listdir(output_dir):
        if _TEMP_RE.match(name):
            fs.remove(os.path.join(output_dir, name))


def _complete_shards(output_dir: str, num_shards: int) -> dict[int, dict]:
    """shard index -> its stats, for shards whose file and stats both exist."""
    done = {}
    for shard in range(num_shards):
        path = os.path.join(output_dir, pretrain_data.shard_name(shard, num_shards))
        stats = example_builder.stats_path(output_dir, shard, num_shards)
        if fs.exists(path) and fs.exists(stats):
            done[shard] = _with_kept_and_cut(io_utils.read_json(stats))
    return done


def _with_kept_and_cut(stats: dict) -> dict:
    """Stats of a shard written before tokens_kept/tokens_cut were counted (an official-
    truncation build): every example holds [CLS] A [SEP], plus [SEP] after a second segment."""
    if "tokens_kept" not in stats:
        specials = 3 * stats["examples"] - stats["single_segment"]
        stats = dict(stats, tokens_kept=stats["example_tokens"] - specials)
        stats["tokens_cut"] = stats["tokens"] - stats["tokens_kept"]
    return stats


# ---------------------------------------------------------------------------------------------
# SentencePiece training (--vocab-size).

def _corpus_sentences(files: list[corpus.InputFile], skip_bad_files: bool,
                      log: Callable[[str], None]) -> Iterator[str]:
    """Lines of the corpus for SentencePiece training, an equal quota from each file."""
    quota = max(1, SPM_MAX_SENTENCES // len(files))
    for file in files:
        unit = corpus.Unit(file, 0, file.size)
        taken = 0
        try:
            for document in corpus.iter_documents(unit):
                for line in document.lines:
                    if taken >= quota:
                        break
                    line = line.strip()
                    if line:
                        taken += 1
                        yield line
                if taken >= quota:
                    break
        except corpus.CorpusError as e:
            if not skip_bad_files:
                raise
            log(f"SentencePiece training: skipping {file.relpath}: {e}")


def _train_spm(cfg: BuildConfig, files: list[corpus.InputFile], reuse: bool) -> str:
    path = os.path.join(cfg.output_dir, SPM_MODEL_NAME)
    if reuse and fs.exists(path):
        cfg.log(f"Reusing the SentencePiece model {path} trained by the earlier run")
        return path
    cfg.log(f"Training a SentencePiece vocabulary of {cfg.vocab_size} pieces on the corpus ...")
    start = time.time()
    # SentencePiece's trainer writes local files only: train in a local temporary directory,
    # then copy (atomically) to the output directory, which may be a URL.
    temp_dir = tempfile.mkdtemp(prefix=".spm-training-")
    temp_prefix = os.path.join(temp_dir, "spm")
    try:
        tokenization.train_sentencepiece(
            _corpus_sentences(files, cfg.skip_bad_files, cfg.log), temp_prefix, cfg.vocab_size,
            do_lower_case=cfg.lower_case, max_sentences=SPM_MAX_SENTENCES)
        io_utils.copy_file(temp_prefix + ".vocab", os.path.join(cfg.output_dir, "spm.vocab"))
        io_utils.copy_file(temp_prefix + ".model", path)
    finally:
        shutil.rmtree(temp_dir, ignore_errors=True)
    cfg.log(f"SentencePiece model written to {path} ({time.time() - start:.1f} s)")
    return path


# ---------------------------------------------------------------------------------------------
# Running.

def _describe_group(task: example_builder.GroupTask) -> str:
    shards = ", ".join(pretrain_data.shard_name(s, task.num_shards) for s in task.write)
    return f"building {shards}"


def _run_tasks(tasks: list[example_builder.GroupTask], num_processes: int,
               on_progress: Callable[[int, int, int], None]) -> list[example_builder.GroupResult]:
    """Builds the groups here (one process) or in worker processes (util/workers.py: a worker
    that dies raises WorkerDied at once; the shards already renamed into place are complete and
    a re-run keeps them)."""
    if num_processes == 1 or len(tasks) <= 1:
        return [example_builder.build_group(task, on_progress) for task in tasks]
    return workers.run(example_builder.build_group, tasks, num_processes, on_progress,
                       _describe_group)


def _settings_record(cfg: BuildConfig, files: list[corpus.InputFile], num_shards: int) -> dict:
    """Everything that determines the shards' content; a resumed build must match it exactly."""
    if cfg.vocab_size is not None:
        vocab_id = {"train_sentencepiece_vocab_size": cfg.vocab_size}
    else:
        vocab_path = cfg.vocab_file or cfg.spm_model
        if not fs.isfile(vocab_path):
            raise BuildError(f"vocabulary {vocab_path} {fs.not_a_file(vocab_path)}")
        vocab_id = {"sha256": io_utils.sha256_file(vocab_path)}
    strip_accents = cfg.lower_case if cfg.strip_accents is None else cfg.strip_accents
    config = {
        "format_version": pretrain_data.FORMAT_VERSION,
        "tokenizer": cfg.kind,
        "vocab": vocab_id,
        "do_lower_case": cfg.lower_case,
        "strip_accents": strip_accents if cfg.kind == "wordpiece" else None,
        "max_seq_length": cfg.max_seq_length,
        "blanks_separate_docs": cfg.blanks_separate_docs,
        "official_truncation": cfg.official_truncation,
        "seed": cfg.seed,
        "num_out_files": num_shards,
        "eval_fraction": cfg.eval_fraction,
        "corpus": {"num_files": len(files), "bytes": sum(f.size for f in files),
                   "fingerprint": corpus_fingerprint(files)},
    }
    return config


BUILD_LOCK_FILE = ".build.lock"


def build_dataset(cfg: BuildConfig) -> dict:
    """Runs a whole build (or the rest of an interrupted one); returns the metadata written.

    Raises training_utils.RunLockError while another build writes to the same --output-dir
    (each would remove the other's temporaries and shards)."""
    cfg.validate()
    if fs.exists(cfg.output_dir) and not fs.isdir(cfg.output_dir):
        raise BuildError(f"--output-dir {cfg.output_dir} is an existing file, not a directory; "
                         "choose a directory")
    fs.makedirs(cfg.output_dir)
    with training_utils.RunLock(cfg.output_dir, filename=BUILD_LOCK_FILE):
        return _build_dataset(cfg)


def _build_dataset(cfg: BuildConfig) -> dict:
    start_time = time.time()
    cfg.validate()
    log = cfg.log
    files = corpus.find_input_files(cfg.corpus_dir)
    problems = [f.problem for f in files if f.problem is not None]
    if problems and not cfg.skip_bad_files:
        raise corpus.CorpusError(problems[0] + "; fix or remove it, or pass --skip-bad-files")
    total_bytes = sum(f.size for f in files)
    fs.makedirs(cfg.output_dir)
    existing = _existing_config(cfg.output_dir)

    num_shards = cfg.num_out_files
    if num_shards is None:
        if existing is not None:
            num_shards = existing["num_out_files"]
            log(f"Resuming the build in {cfg.output_dir}: {num_shards} shards as before")
        else:
            num_shards = auto_num_out_files(sum(f.weight for f in files), cfg.num_processes,
                                            cfg.eval_fraction)
            log(f"Writing {num_shards} shards for {total_bytes / 1e6:.1f} MB of input "
                f"(about {TARGET_SHARD_BYTES >> 20} MB of text per shard, at least 4 per process "
                f"and {math.ceil(1 / cfg.eval_fraction - 1e-9) if cfg.eval_fraction else 1} for "
                f"the held-out split); set --num-out-files to choose")

    config = _settings_record(cfg, files, num_shards)
    _check_output_dir(cfg.output_dir, config, existing)
    same_build = existing == config
    _remove_stale_temp_files(cfg.output_dir)

    spm_model = _train_spm(cfg, files, same_build) if cfg.vocab_size is not None else cfg.spm_model
    # Recorded once the vocabulary it names is in place: a build killed while retraining one
    # must not leave a record that passes the old spm.model off as the new settings'.
    io_utils.write_json(_config_path(cfg.output_dir), config)
    spec = example_builder.TokenizerSpec(
        cfg.vocab_file, spm_model, cfg.lower_case,
        cfg.strip_accents if cfg.kind == "wordpiece" else None)
    tokenizer = spec.build()  # fails early (missing special tokens) before any work starts
    vocab_path = fs.abspath(cfg.vocab_file or spm_model)

    plan = make_plan(files, num_shards, cfg.eval_fraction, cfg.seed, cfg.blanks_separate_docs)
    if cfg.eval_fraction > 0 and not plan.eval_groups:
        log(_no_held_out_split(cfg, files, num_shards))
    done = _complete_shards(cfg.output_dir, num_shards)
    tasks = []
    for g, units in enumerate(plan.groups):
        shards = plan.shards_of(g)
        missing = tuple(s for s in shards if s not in done)
        if missing:
            tasks.append(example_builder.GroupTask(
                group=g, units=tuple(units), shards=shards, write=missing, num_shards=num_shards,
                output_dir=fs.abspath(cfg.output_dir), tokenizer=spec,
                max_seq_length=cfg.max_seq_length, blanks_separate_docs=cfg.blanks_separate_docs,
                seed=cfg.seed, skip_bad_files=cfg.skip_bad_files,
                official_truncation=cfg.official_truncation))
    if done:
        log(f"{len(done)} of {num_shards} shards are already complete; "
            f"building the other {num_shards - len(done)}")
    tasks.sort(key=lambda t: -sum(u.weight for u in t.units))  # largest first: better balance

    work_bytes = sum(u.end - u.start for t in tasks for u in t.units)
    work_files = sum(1 for t in tasks for u in t.units if u.end == u.file.size)
    results = _run_with_progress(tasks, cfg, work_bytes, work_files)

    metadata = _write_metadata(cfg, config, plan, tokenizer, vocab_path, spm_model, files,
                               results, done, time.time() - start_time, work_bytes)
    return metadata


def _corpus_words(cfg: BuildConfig, files) -> str:
    return (f"--corpus-dir {cfg.corpus_dir} ({len(files)} file(s), "
            f"{sum(f.size for f in files) / 1e6:.3g} MB)")


def _no_held_out_split(cfg: BuildConfig, files, num_shards: int) -> str:
    """Why the plan holds nothing out, and what to change: a held-out split needs two pieces of
    work (whole files, or ranges of a large one) in two shards."""
    if num_shards < 2:
        chosen = "--num-out-files 1" if cfg.num_out_files else \
            f"under {2 * MIN_SHARD_BYTES >> 10} KB of text, one shard by default"
        return (f"Warning: no held-out split: {_corpus_words(cfg, files)} goes into 1 shard "
                f"({chosen}) and a held-out split needs a shard of its own; pass --num-out-files "
                "2 or more (or add text), or --eval-fraction 0 to build without one")
    return (f"Warning: no held-out split: {_corpus_words(cfg, files)} is too small to hold out "
            f"--eval-fraction {cfg.eval_fraction:g} of it: it makes one piece of work (a single "
            f"file under {2 * MIN_CHUNK_BYTES >> 10} KB is not split) and a held-out split needs "
            "two. Add text (another file), or pass --eval-fraction 0 to build without one "
            "(pre-training then evaluates only with hparam eval_tfrecords)")


def _run_with_progress(tasks, cfg: BuildConfig, work_bytes: int, work_files: int):
    from tqdm import tqdm

    bar = tqdm(total=work_bytes, unit="B", unit_scale=True, desc="Building",
               disable=not cfg.show_progress or not tasks, file=sys.stderr, dynamic_ncols=True)
    counts = {"files": 0, "examples": 0}

    def on_progress(nbytes: int, examples: int, files: int) -> None:
        counts["files"] += files
        counts["examples"] += examples
        bar.set_postfix_str(f"files {counts['files']}/{work_files}, examples {counts['examples']:,}",
                            refresh=False)
        bar.update(nbytes)

    try:
        return _run_tasks(tasks, cfg.num_processes, on_progress)
    finally:
        bar.close()


def _merged_shard_stats(plan: Plan, results, done: dict[int, dict]) -> tuple[dict[int, dict], list]:
    """The stats of every shard (already complete or written now) and the skipped files."""
    shard_stats = dict(done)
    skipped = []
    for result in results:
        skipped.extend(result.skipped)
        for shard, stats in result.shards.items():
            if shard not in done:
                shard_stats[shard] = dataclasses.asdict(stats)
    missing = [s for s in range(plan.num_shards) if s not in shard_stats]
    if missing:  # cannot happen unless files vanish underneath us
        raise BuildError(f"shards {missing[:5]} were not written; re-run to complete them")
    return shard_stats, skipped


_TOTAL_KEYS = ("examples", "tokens", "tokens_kept", "tokens_cut", "example_tokens", "single_segment")


def _metadata_record(cfg: BuildConfig, config: dict, plan: Plan, tokenizer, vocab_path: str,
                     spm_model: str | None, shard_stats: dict[int, dict], skipped: list,
                     totals: dict, eval_examples: int, seconds: float) -> dict:
    num_shards = plan.num_shards
    eval_set = set(plan.eval_shards)
    shards = {}
    for s in range(num_shards):
        entry = dict(shard_stats[s])
        entry["split"] = "eval" if s in eval_set else "train"
        shards[pretrain_data.shard_name(s, num_shards)] = entry
    metadata = {
        "format_version": pretrain_data.FORMAT_VERSION,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "tokenizer": cfg.kind,
        "vocab_file": vocab_path,
        "vocab_sha256": io_utils.sha256_file(vocab_path),
        "vocab_size": tokenizer.vocab_size,
        "special_ids": tokenizer.special_ids,
        **{key: config[key] for key in ("do_lower_case", "strip_accents", "max_seq_length",
                                        "blanks_separate_docs", "official_truncation", "seed",
                                        "num_out_files", "eval_fraction")},
        "eval_files": [pretrain_data.shard_name(s, num_shards) for s in sorted(eval_set)],
        "num_examples": totals["examples"],
        "num_tokens": totals["tokens"],
        "num_tokens_kept": totals["tokens_kept"],
        "num_tokens_cut": totals["tokens_cut"],
        "num_example_tokens": totals["example_tokens"],
        "num_single_segment": totals["single_segment"],
        "num_train_examples": totals["examples"] - eval_examples,
        "num_eval_examples": eval_examples,
        "shards": shards,
        # Sizes on disk: readers can tell a truncated or partial copy of a shard at a glance
        # (TFRecord readers cannot when the cut falls between records).
        "shard_bytes": {name: fs.getsize(os.path.join(cfg.output_dir, name))
                        for name in shards},
        "corpus": {"dir": fs.abspath(cfg.corpus_dir), **config["corpus"]},
        "skipped_files": [{"file": name, "error": error} for name, error in skipped],
        "build": {"num_processes": cfg.num_processes, "seconds": round(seconds, 1)},
        "config": config,
    }
    if spm_model is not None:
        metadata["spm_model"] = fs.abspath(spm_model)
    return metadata


def _log_summary(cfg: BuildConfig, plan: Plan, files, shard_stats: dict[int, dict],
                 skipped: list, totals: dict, eval_examples: int, done: dict[int, dict],
                 seconds: float, work_bytes: int) -> None:
    num_shards = plan.num_shards
    empty = sum(1 for v in shard_stats.values() if v["examples"] == 0)
    mb = work_bytes / 1e6
    line = (f"Done: {totals['examples']:,} examples ({totals['tokens']:,} tokens: "
            f"{totals['tokens_kept']:,} kept, {totals['tokens_cut']:,} cut) in "
            f"{num_shards} shards ({len(plan.eval_shards)} held out for eval, "
            f"{eval_examples:,} examples) "
            f"from {len(files)} files; {mb:.1f} MB processed in {seconds:.1f} s "
            f"({mb / max(seconds, 1e-9):.2f} MB/s) -> {cfg.output_dir}")
    if done:
        line += f"; {len(done)} shards were already complete"
    if skipped:
        line += f"; skipped {len(skipped)} bad file(s) (listed in metadata.json)"
    cfg.log(line)
    if empty:
        cfg.log(f"Warning: {empty} of {num_shards} shards are empty; the corpus is small for "
                f"{num_shards} shards, consider a smaller --num-out-files")
    if plan.eval_shards and eval_examples == 0:
        cfg.log(f"Warning: the held-out shards hold no example: {_corpus_words(cfg, files)} is "
                "too small for a held-out split (its held-out part has no text); add text, or "
                "pass --eval-fraction 0 to build without one")
    for name, error in skipped[:10]:
        cfg.log(f"  skipped {name}: {error}")


def _write_metadata(cfg: BuildConfig, config: dict, plan: Plan, tokenizer, vocab_path: str,
                    spm_model: str | None, files, results, done: dict[int, dict],
                    seconds: float, work_bytes: int) -> dict:
    shard_stats, skipped = _merged_shard_stats(plan, results, done)
    totals = {key: sum(v[key] for v in shard_stats.values()) for key in _TOTAL_KEYS}
    eval_examples = sum(shard_stats[s]["examples"] for s in set(plan.eval_shards))
    if totals["examples"] == 0:
        reason = (f"; {len(skipped)} bad file(s) were skipped" if skipped else "")
        raise BuildError(f"no examples were produced from the {len(files)} file(s) in "
                         f"{cfg.corpus_dir}: they hold no text{reason}")
    metadata = _metadata_record(cfg, config, plan, tokenizer, vocab_path, spm_model, shard_stats,
                                skipped, totals, eval_examples, seconds)
    io_utils.write_json(os.path.join(cfg.output_dir, pretrain_data.METADATA_FILE), metadata)
    _log_summary(cfg, plan, files, shard_stats, skipped, totals, eval_examples, done, seconds,
                 work_bytes)
    return metadata
