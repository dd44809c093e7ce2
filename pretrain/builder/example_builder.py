"""Turning a stream of tokenized sentences into pre-training examples, and writing a group of shards.

ExampleBuilder applies the rules of the official ELECTRA build_pretraining_dataset.py
(reimplemented, not copied):
  - sentences (lines) of one document accumulate until they reach a target length
    (max_seq_length, or for 5% of examples a random length in [5, max_seq_length]);
  - a document end (blank line / end of file) closes the current example early;
  - the sentences are split into two segments [CLS] A [SEP] B [SEP]: A takes whole sentences
    up to about half the target (a sentence that would overflow A joins it half of the time
    while B is still empty); 10% of examples are a single segment [CLS] A [SEP].
What does not fit in max_seq_length depends on official_truncation:
  - official_truncation: A is cut to max_seq_length - 2 tokens and B to what is left after
    [CLS] A [SEP] [SEP], and the rest is dropped. On a corpus with one paragraph per line this
    drops about 28% of the text at max_seq_length 128, so it is only kept for reproduction;
  - the default: the sentence that does not fit fills the example up to max_seq_length, and its
    tail and the sentences after it are carried to the next example of the document. No token
    is dropped; with encode_line() cutting long lines at sentence boundaries, examples mostly
    start at a sentence start.

build_group() is the unit of parallel work of build_pretraining_dataset.py: it reads a fixed
list of corpus units, builds examples with an RNG seeded by (seed, group) and writes the
group's shards atomically. A group's output depends only on its inputs and the seed, never on
the number of processes or on which other groups ran, so a resumed build rebuilds exactly the
missing shards.
"""
import dataclasses
import os
import random
import time
from typing import Callable, NamedTuple

from model import tokenization
from pretrain import pretrain_data
from pretrain.builder import corpus, sentences, tfrecord_writer
from util import fs, io_utils, write_errors

SINGLE_SEGMENT_PROB = 0.1     # official: "small chance to only have one segment"
SHORT_TARGET_PROB = 0.05      # official: "small chance for random-length ... example"
MIN_TARGET_LENGTH = 5
# Examples are shuffled through a buffer this large before being written, so that a shard does
# not hold long runs of consecutive examples from the same document.
SHUFFLE_BUFFER = 1000
STATE_DIR = ".build_state"


class Example(NamedTuple):
    """tokens: [CLS] A [SEP] (B [SEP]) ids, unpadded; num_first: len([CLS] A [SEP]);
    num_consumed: tokens taken from the input for it (kept, or cut under official_truncation)."""
    tokens: list[int]
    num_first: int
    num_consumed: int

    @property
    def single_segment(self) -> bool:
        return self.num_first == len(self.tokens)

    @property
    def num_kept(self) -> int:
        return len(self.tokens) - (2 if self.single_segment else 3)  # minus [CLS] and [SEP]s


class ExampleBuilder:
    """Accumulates tokenized sentences of a document and cuts them into examples.

    Args:
      max_length: max_seq_length, including [CLS] and [SEP]s (>= 5).
      cls_id, sep_id: special-token ids.
      rng: the source of all random choices (segment split, short targets).
      official_truncation: drop what does not fit, as the official script (see the module
        docstring); by default it is carried to the next example.
    """

    def __init__(self, max_length: int, cls_id: int, sep_id: int, rng: random.Random,
                 official_truncation: bool = False):
        if max_length < MIN_TARGET_LENGTH:
            raise ValueError(f"max_seq_length must be at least {MIN_TARGET_LENGTH}, got {max_length}")
        self._max_length = max_length
        self._cls = cls_id
        self._sep = sep_id
        self._rng = rng
        self._official_truncation = official_truncation
        self._sentences: list[list[int]] = []
        self._length = 0
        self._target = max_length

    def add_sentence(self, token_ids: list[int]) -> list[Example]:
        """Adds one tokenized sentence (a line); returns the examples completed by it: none, one,
        or with carried text more than one."""
        if not token_ids:
            return []
        self._sentences.append(token_ids)
        self._length += len(token_ids)
        examples = []
        while self._length >= self._target:
            examples.append(self._make_example())
        return examples

    def end_document(self) -> list[Example]:
        """Closes the current document: whatever has accumulated becomes examples."""
        examples = []
        while self._length:
            examples.append(self._make_example())
        return examples

    def _make_example(self) -> Example:
        rng = self._rng
        if rng.random() < SINGLE_SEGMENT_PROB:
            first_target = float("inf")  # everything goes into segment A
        else:
            first_target = (self._target - 3) // 2  # 3 = [CLS] and two [SEP] not yet added
        first: list[int] = []
        second: list[int] = []
        carried: list[list[int]] = []
        for i, sentence in enumerate(self._sentences):
            # A sentence joins A if A is empty, if it fits under A's target, or (with
            # probability 1/2, while B is empty) if A is still short of its target.
            to_first = (not first or len(first) + len(sentence) < first_target
                        or (not second and len(first) < first_target and rng.random() < 0.5))
            segment = first if to_first else second
            if not self._official_truncation:
                # Room under max_length after [CLS] A [SEP], and B's [SEP] once B has begun.
                separators = 3 if second or not to_first else 2
                room = self._max_length - separators - len(first) - len(second)
                if len(sentence) > room:
                    room = max(room, 0)
                    segment.extend(sentence[:room])
                    carried = [sentence[room:]] + self._sentences[i + 1:]
                    break
            segment.extend(sentence)
        if self._official_truncation:
            first = first[:self._max_length - 2]
            second = second[:max(0, self._max_length - len(first) - 3)]
        carried_length = sum(map(len, carried))
        consumed = self._length - carried_length

        self._sentences = carried
        self._length = carried_length
        if rng.random() < SHORT_TARGET_PROB:
            self._target = rng.randint(MIN_TARGET_LENGTH, self._max_length)
        else:
            self._target = self._max_length

        tokens = [self._cls] + first + [self._sep]
        num_first = len(tokens)
        if second:
            tokens += second
            tokens.append(self._sep)
        return Example(tokens, num_first, consumed)


def encode_line(line: str, encode: Callable[[str], list[int]], max_length: int) -> list[list[int]]:
    """A line's token ids as the builder's sentences: the whole line when it fits in one segment
    (max_length - 2 tokens, as the official script treats every line), else its sentences, each
    tokenized alone (so no boundary falls inside a word) and cut into chunks that fit."""
    limit = max_length - 2
    ids = encode(line)
    if len(ids) <= limit:
        return [ids]
    pieces = []
    for sentence in sentences.split_sentences(line):
        ids = encode(sentence)
        pieces += [ids[i:i + limit] for i in range(0, len(ids), limit)]
    return pieces


# ---------------------------------------------------------------------------------------------
# One group of shards: the worker function.

@dataclasses.dataclass(frozen=True)
class TokenizerSpec:
    """What a worker needs to rebuild the tokenizer (tokenizers themselves are not sent)."""
    vocab_file: str | None
    spm_model: str | None
    do_lower_case: bool
    strip_accents: bool | None

    def build(self):
        return tokenization.build_tokenizer(self.vocab_file, self.spm_model,
                                            self.do_lower_case, self.strip_accents)


@dataclasses.dataclass(frozen=True)
class GroupTask:
    """group: index; units: its inputs; shards: the shard indices it fills (round robin);
    write: the subset of `shards` to (re)write; blanks_separate_docs: None = per source;
    official_truncation: see ExampleBuilder."""
    group: int
    units: tuple[corpus.Unit, ...]
    shards: tuple[int, ...]
    write: tuple[int, ...]
    num_shards: int
    output_dir: str
    tokenizer: TokenizerSpec
    max_seq_length: int
    blanks_separate_docs: bool | None
    seed: int
    skip_bad_files: bool
    official_truncation: bool = False


@dataclasses.dataclass
class ShardStats:
    examples: int = 0
    tokens: int = 0            # tokenizer tokens of the sentences in the shard's examples
    tokens_kept: int = 0       # of those, the tokens in the examples ...
    tokens_cut: int = 0        # ... and the ones cut off (official_truncation only)
    example_tokens: int = 0    # non-padding positions ([CLS]/[SEP] included)
    single_segment: int = 0


@dataclasses.dataclass
class GroupResult:
    group: int
    shards: dict[int, ShardStats]
    skipped: list[tuple[str, str]]   # (file, reason)
    files: int
    bytes_read: int


_TOKENIZERS: dict[TokenizerSpec, object] = {}


def get_tokenizer(spec: TokenizerSpec):
    """One tokenizer per process and spec, so its word cache stays warm across groups."""
    if spec not in _TOKENIZERS:
        _TOKENIZERS[spec] = spec.build()
    return _TOKENIZERS[spec]


def stats_path(output_dir: str, shard: int, num_shards: int) -> str:
    return os.path.join(output_dir, STATE_DIR, pretrain_data.shard_name(shard, num_shards) + ".json")


def temp_shard_path(output_dir: str, shard: int, num_shards: int) -> str:
    # Hidden, so "pretrain_data.tfrecord*" globs never pick up a half-written shard.
    return os.path.join(output_dir, f".{pretrain_data.shard_name(shard, num_shards)}.tmp-{os.getpid()}")


class _Progress:
    """Accumulates (bytes, examples, files) and hands them to `report` at most every 0.2 s."""

    def __init__(self, report: Callable[[int, int, int], None] | None):
        self._report = report
        self._pending = [0, 0, 0]
        self._last = time.monotonic()

    def add(self, nbytes: int = 0, examples: int = 0, files: int = 0) -> None:
        p = self._pending
        p[0] += nbytes
        p[1] += examples
        p[2] += files
        if self._report is not None and time.monotonic() - self._last > 0.2:
            self.flush()

    def flush(self) -> None:
        if self._report is not None and any(self._pending):
            self._report(*self._pending)
        self._pending = [0, 0, 0]
        self._last = time.monotonic()


class _GroupShards:
    """The output side of a group: a shuffle buffer, round-robin shard assignment, per-shard
    stats, and the group's shards written to hidden temp files and renamed when complete."""

    def __init__(self, task: GroupTask, shuffle_rng: random.Random, progress: _Progress,
                 check_ids: bool):
        self._task = task
        self._shuffle_rng = shuffle_rng
        self._progress = progress
        self._check_ids = check_ids
        self.stats = {s: ShardStats() for s in task.shards}
        self._temp_paths = {s: temp_shard_path(task.output_dir, s, task.num_shards)
                            for s in task.write}
        self._writers = {s: tfrecord_writer.TFRecordWriter(p, output=self._final_path(s))
                         for s, p in self._temp_paths.items()}
        self._buffer: list[Example] = []
        self._emitted = 0

    def emit(self, examples: list[Example]) -> None:
        for example in examples:
            self._progress.add(examples=1)
            if len(self._buffer) < SHUFFLE_BUFFER:
                self._buffer.append(example)
                continue
            j = self._shuffle_rng.randrange(SHUFFLE_BUFFER)
            self._write(self._buffer[j])
            self._buffer[j] = example

    def _write(self, example: Example) -> None:
        task = self._task
        shard = task.shards[self._emitted % len(task.shards)]
        self._emitted += 1
        s = self.stats[shard]
        s.examples += 1
        s.tokens += example.num_consumed
        s.tokens_kept += example.num_kept
        s.tokens_cut += example.num_consumed - example.num_kept
        s.example_tokens += len(example.tokens)
        s.single_segment += example.single_segment
        writer = self._writers.get(shard)
        if writer is not None:
            writer.write(pretrain_data.serialize_unpadded(
                example.tokens, example.num_first, task.max_seq_length, self._check_ids))

    def _final_path(self, shard: int) -> str:
        return os.path.join(self._task.output_dir,
                            pretrain_data.shard_name(shard, self._task.num_shards))

    def commit(self) -> None:
        """Writes out the buffer, then each shard's stats and the shard itself."""
        self._shuffle_rng.shuffle(self._buffer)
        for example in self._buffer:
            self._write(example)
        for writer in self._writers.values():
            writer.close()
        # Stats first, then the shard: a shard that exists is complete and has its stats.
        task = self._task
        for shard, path in self._temp_paths.items():
            io_utils.write_json(stats_path(task.output_dir, shard, task.num_shards),
                                dataclasses.asdict(self.stats[shard]))
            with write_errors.naming(self._final_path(shard), "shard"):
                fs.replace(path, self._final_path(shard))

    def discard_unfinished(self) -> None:
        for writer in self._writers.values():
            writer.close()
        for path in self._temp_paths.values():
            if fs.exists(path):
                fs.remove(path)


class _GroupReader:
    """The input side of a group: reads its units in order and feeds sentences to the
    ExampleBuilder; with skip_bad_files, records bad files instead of raising."""

    def __init__(self, task: GroupTask, builder: ExampleBuilder, encode: Callable[[str], list[int]],
                 shards: _GroupShards, progress: _Progress):
        self._task = task
        self._builder = builder
        self._encode = encode
        self._shards = shards
        self._progress = progress
        self.skipped: list[tuple[str, str]] = []
        self.bytes_read = 0
        self.files = 0

    def _on_bytes(self, n: int) -> None:
        self.bytes_read += n
        self._progress.add(nbytes=n)

    def _sentences(self, line: str) -> list[list[int]]:
        if self._task.official_truncation:
            return [self._encode(line)]  # a line is one sentence, however long
        return encode_line(line, self._encode, self._task.max_seq_length)

    def read(self, unit: corpus.Unit) -> None:
        task, emit = self._task, self._shards.emit
        if task.skip_bad_files and not unit.file.is_tar:
            try:
                corpus.validate_utf8(unit)  # a cheap decode-only pass, so a bad file adds nothing
            except corpus.CorpusError as e:
                self.skipped.append((unit.describe(), str(e)))
                self._on_bytes(unit.end - unit.start)
                return
        try:
            for document in corpus.iter_documents(unit, self._on_bytes):
                self._read_document(unit, document)
        except corpus.CorpusError as e:
            if not task.skip_bad_files:
                raise
            # Only a damaged archive gets here (other files were validated above); the
            # documents read before the damage are kept.
            self.skipped.append((unit.describe(), f"{e} (documents before the damage were used)"))
            emit(self._builder.end_document())
        if unit.end == unit.file.size:  # the last range of a file: count the file as done
            self.files += 1
            self._progress.add(files=1)

    def _read_document(self, unit: corpus.Unit, document) -> None:
        task, emit, builder = self._task, self._shards.emit, self._builder
        lines = document.lines
        if task.skip_bad_files and unit.file.is_tar:
            try:
                lines = list(lines)  # archive members are single, small documents
            except corpus.CorpusError as e:
                self.skipped.append((document.name, str(e)))
                return
        split_on_blanks = (document.blank_lines_split if task.blanks_separate_docs is None
                           else task.blanks_separate_docs)
        for line in lines:
            line = line.strip()
            if line:
                for piece in self._sentences(line):
                    emit(builder.add_sentence(piece))
            elif split_on_blanks:
                emit(builder.end_document())
        # The end of a file, range or archive member always ends a document.
        emit(builder.end_document())


def build_group(task: GroupTask, report: Callable[[int, int, int], None] | None = None
                ) -> GroupResult:
    """Builds and writes the shards of one group (see the module docstring)."""
    tokenizer = get_tokenizer(task.tokenizer)
    rng = random.Random(f"{task.seed}:{task.group}:examples")
    shuffle_rng = random.Random(f"{task.seed}:{task.group}:shuffle")
    builder = ExampleBuilder(task.max_seq_length, tokenizer.cls_id, tokenizer.sep_id, rng,
                             task.official_truncation)
    units = list(task.units)
    rng.shuffle(units)  # like the official script, which shuffles its file list

    progress = _Progress(report)
    # Tokenizer ids lie in [0, vocab_size): the serializer may skip its range check.
    check_ids = len(tokenizer.vocab) - 1 > pretrain_data.MAX_FAST_ID
    shards = _GroupShards(task, shuffle_rng, progress, check_ids)
    reader = _GroupReader(task, builder, tokenizer.encode, shards, progress)
    try:
        for unit in units:
            reader.read(unit)
        shards.commit()
    finally:
        shards.discard_unfinished()
        progress.flush()
    return GroupResult(task.group, shards.stats, reader.skipped, reader.files, reader.bytes_read)
