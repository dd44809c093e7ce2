"""Sequence tagging: CoNLL-2000 text chunking (task "chunk") and its token classification head.

Data: `<raw_data_dir>/chunk/{train,dev,test}.txt` in the CoNLL-2000 format: one token per line as
"word POS chunk-tag" (IOB, e.g. "B-NP"), a blank line after each sentence, "-DOCSTART-" lines
ignored. CoNLL-2000 has no official dev set: without dev.txt the last `heldout_dev_sentences`
sentences of train.txt become the dev set (and are left out of training), which is logged.

Labels: each file's tags are read in its own scheme (IOB2, IOB1 or BIOES, read off its tags:
tag_schemes.py) as IOB2, the gold tags of scoring and outputs; each word's chunk is re-encoded in
BIOES over the fixed CoNLL-2000 chunk types (the official release also trains on BIOES; hparam
`tagging_label_encoding: IOB2` trains on O/B-/I- labels instead); predictions are decoded back
to IOB2 for scoring and output. Only the first
WordPiece of a word carries its label; the other pieces get none.

Windows: a sentence whose pieces do not fit in `max_seq_length - 2` ([CLS] ... [SEP]) is cut into
overlapping windows of whole words. Each word is labelled in exactly one window (the one where it
has the most context), so the loss counts every word once and the
scorer merges the windows back into the full sentence: no word is dropped.

Head: `task_specific/<task>/dense/{kernel,bias}` on the encoder output at each word's first piece,
no dropout (as the official tagging head), softmax cross-entropy summed over a row's words.
"""
import dataclasses
import logging
import os
from typing import Any, Sequence

import tensorflow as tf

import configure_finetuning
from finetune import feature_spec
from finetune import heads
from finetune import task as task_lib
from finetune.tagging import tag_schemes
from finetune.tagging import tagging_metrics
from model import modeling
from util import fs, io_utils

log = logging.getLogger(__name__)

# The chunk types of CoNLL-2000 (all occur in its training set).
CONLL2000_CHUNK_TYPES = ("ADJP", "ADVP", "CONJP", "INTJ", "LST", "NP", "PP", "PRT", "SBAR",
                         "UCP", "VP")
# The official tagging featurizer sets segment id 1 on every real token (CLS and SEP included).
SEGMENT_ID = 1
DOCSTART = "-DOCSTART-"


def chunk_label_list(chunk_types: Sequence[str], encoding: str = "BIOES") -> list[str]:
    """"O" and B/I/E/S-<type> (IOB2: B/I-<type>) for every type, sorted as strings (the official
    label order)."""
    prefixes = "BIES" if encoding == "BIOES" else "BI"
    return sorted([tagging_metrics.OUTSIDE] + [f"{p}-{t}" for t in chunk_types for p in prefixes])


# -- reading --------------------------------------------------------------------------------------


@dataclasses.dataclass
class TaggingExample(task_lib.Example):
    """One sentence: its words, their tags as in the file, and the BIOES training labels."""
    words: list[str] = dataclasses.field(default_factory=list)
    tags: list[str] = dataclasses.field(default_factory=list)
    labels: list[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class ConllSentence:
    path: str
    words: list[str]
    tags: list[str]
    lines: list[int]  # 1-based line of each word in `path`

    @property
    def source(self) -> str:
        return f"{self.path}:{self.lines[0]}"


def read_conll(path: str, word_column: int = 0, tag_column: int = 2,
               num_columns: int | None = 3) -> list[ConllSentence]:
    """Sentences of a CoNLL-style file: one token per line in whitespace-separated columns, a
    blank line between sentences, "-DOCSTART-" lines skipped.

    Args:
      word_column, tag_column: 0-based (negative: from the end) columns of the word and its tag.
      num_columns: the number of columns every line must have (CoNLL-2000: word, POS, chunk);
        None accepts any line that holds both columns.

    Raises:
      TaskDataError: a line with a wrong number of columns (or another number than the first
        token line: a word or tag holding a space), word and tag in the same column; naming the
        file and line.
    """
    sentences: list[ConllSentence] = []
    current = ConllSentence(path, [], [], [])
    needed = max(c + 1 if c >= 0 else -c for c in (word_column, tag_column))
    first_line, width = 0, 0  # the first token line and its column count
    try:
        with fs.open(path, encoding="utf-8-sig") as f:
            lines = f.readlines()
    except UnicodeDecodeError as e:
        raise task_lib.not_utf8_error(path, e) from None
    for line_no, line in enumerate(lines, start=1):
        fields = line.split()
        if not fields:
            if current.words:
                sentences.append(current)
                current = ConllSentence(path, [], [], [])
            continue
        if fields[0] == DOCSTART:
            continue
        if num_columns is not None and len(fields) != num_columns:
            raise task_lib.TaskDataError(
                f"{path}:{line_no}: expected {num_columns} space-separated columns (word, POS "
                f"tag, chunk tag), found {len(fields)}: {line.rstrip()[:200]!r}")
        if len(fields) < needed:
            raise task_lib.TaskDataError(
                f"{path}:{line_no}: expected at least {needed} whitespace-separated columns "
                f"(word column {word_column}, tag column {tag_column}), found {len(fields)}: "
                f"{line.rstrip()[:200]!r}")
        if not width:
            first_line, width = line_no, len(fields)
            if word_column % width == tag_column % width:
                raise task_lib.TaskDataError(
                    f"{path}:{line_no}: word column {word_column} and tag column {tag_column} "
                    f"are the same column of this line's {width}; the tags must be another "
                    f"column than the words")
        elif len(fields) != width:
            raise task_lib.TaskDataError(
                f"{path}:{line_no}: {len(fields)} whitespace-separated columns where line "
                f"{first_line} has {width}: does a word or tag hold a space? Columns are split "
                f"at any whitespace, so neither can: {line.rstrip()[:200]!r}")
        current.words.append(fields[word_column])
        current.tags.append(fields[tag_column])
        current.lines.append(line_no)
    if current.words:  # no blank line after the last sentence
        sentences.append(current)
    return sentences


# -- windows --------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Window:
    """Words [start, end) go into the input; the words in `owned` are labelled in this window."""
    start: int
    end: int
    owned: frozenset


def plan_windows(piece_counts: Sequence[int], budget: int) -> list[Window]:
    """Cuts a sentence into windows of whole words holding at most `budget` pieces each.

    Each window is as long as fits; the next one starts at the first word such that at most
    budget // 2 pieces overlap the previous window, so words near a cut still see context. Every
    word is owned by exactly one window: the one where it has the most words of context on its
    shorter side (the earlier window on ties). Windows left owning nothing are dropped.

    Args:
      piece_counts: pieces per word, each in [1, budget].
      budget: pieces per window.
    """
    if budget < 1:
        raise ValueError(f"window budget must be >= 1, got {budget}")
    if any(not 1 <= c <= budget for c in piece_counts):
        raise ValueError(f"every word needs 1..{budget} pieces, got {list(piece_counts)}")
    n = len(piece_counts)
    spans: list[tuple[int, int]] = []
    start = 0
    while start < n:
        end, used = start, 0
        while end < n and used + piece_counts[end] <= budget:
            used += piece_counts[end]
            end += 1
        spans.append((start, end))
        if end == n:
            break
        # The next start is after `start` (progress) and at most `end` (no word skipped).
        nxt, overlap = end, 0
        while nxt - 1 > start and overlap + piece_counts[nxt - 1] <= budget // 2:
            nxt -= 1
            overlap += piece_counts[nxt]
        start = nxt
    owners: list[list[int]] = [[] for _ in spans]
    for word in range(n):
        best = max((min(word - s, e - 1 - word), -i) for i, (s, e) in enumerate(spans)
                   if s <= word < e)
        owners[-best[1]].append(word)
    return [Window(s, e, frozenset(owned)) for (s, e), owned in zip(spans, owners) if owned]


# -- head -----------------------------------------------------------------------------------------


class TokenClassificationHead(heads.LinearTaskHead):
    """Dense layer on each word's first piece -> logits [B, S, C]; loss summed over words."""

    def __call__(self, encoder_output, features, *, training, seeds, percent_done):
        name = self.task_name
        sequence = tf.cast(encoder_output.sequence_output, tf.float32)  # [B, L, H]
        positions = features[f"{name}_labeled_positions"]  # [B, S] first piece of each word
        reprs = tf.gather(sequence, positions, batch_dims=1)  # [B, S, H]
        logits = self.dense(reprs)  # [B, S, C]
        labels = features[f"{name}_labels"]  # [B, S]
        labels_mask = features[f"{name}_labels_mask"]  # [B, S] float, 1 on owned words
        word_losses = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
        losses = tf.reduce_sum(word_losses * labels_mask, axis=-1)  # [B]
        outputs = dict(loss=losses,
                       predictions=tf.argmax(logits, axis=-1, output_type=tf.int32),
                       labels=labels, labels_mask=labels_mask,
                       first_word=features[f"{name}_first_word"], eid=features[f"{name}_eid"])
        return losses, outputs


# -- tasks ----------------------------------------------------------------------------------------


class TaggingTask(task_lib.Task):
    """Labels every word of a sentence; chunk (span) tags scored as conlleval, or plain per-token
    tags (e.g. POS) scored by accuracy. Subclasses set the file layout and the tag set."""

    word_column = 0
    tag_column = 2
    # Every line's column count; None: any count that holds both columns, the same on every line.
    num_columns: int | None = 3
    # True: O / B-, I- (E-, S-)<type> chunk tags; False: any tag strings; None: chunk tags when
    # every tag of the training file is one.
    span_tags: bool | None = True
    # Span tags: the chunk types; token tags: the tags. Empty: read from the training file.
    chunk_types: Sequence[str] = ()

    def __init__(self, config: configure_finetuning.FinetuningConfig, name: str, tokenizer):
        super().__init__(config, name)
        self._tokenizer = tokenizer
        self.label_encoding = config.tagging_label_encoding
        self._files: dict[str, list[ConllSentence]] = {}
        self._schemes: dict[str, str] = {}  # split -> the tag scheme of its file
        self._examples: dict[str, list[TaggingExample]] = {}
        self._logged_holdout = False
        if not self.chunk_types or self.span_tags is None:
            train = self._read_path(self.split_path("train"), check=False)
            if self.span_tags is None:
                self.span_tags = _holds_chunk_tags(train)
                log.info("task %s: tags read as %s tags (set \"encoding\" to choose)", name,
                         "chunk" if self.span_tags else "per-token")
            if not self.chunk_types:
                self.chunk_types = self.types_in(train)
        self._check_something_to_learn()
        if self.span_tags:
            self.label_list = chunk_label_list(self.chunk_types, self.label_encoding)
            self._valid_tags = {tagging_metrics.OUTSIDE} | {
                f"{p}-{t}" for t in self.chunk_types for p in "BIES"}
        else:
            self.label_list = sorted(self.chunk_types)
            self._valid_tags = set(self.label_list)
        self._label_ids = {label: i for i, label in enumerate(self.label_list)}

    def _check_something_to_learn(self) -> None:
        """One tag (every word O, or every word NN) teaches nothing: refused before training."""
        if self.span_tags and self.chunk_types:
            return
        if not self.span_tags and len(self.chunk_types) >= 2:
            return
        path = self.split_path("train")
        if not self._read_path(path, check=False):
            raise task_lib.TaskDataError(f"{path}: no sentences to train on")
        if self.span_tags:
            raise task_lib.TaskDataError(
                f"{path}: no chunk to learn: every tag is O (chunks are B-/I-<type> tags; for "
                f"tags that are not chunks set \"encoding\": \"token\")")
        found = f"every tag is {self.chunk_types[0]!r}" if self.chunk_types else "no tags"
        raise task_lib.TaskDataError(f"{path}: {found}; a tagging task needs at least two tags "
                                     f"to learn")

    def types_in(self, sentences: Sequence[ConllSentence]) -> list[str]:
        """The chunk types (span tags) or the tags of some sentences, sorted."""
        if not self.span_tags:
            return sorted({t for s in sentences for t in s.tags})
        types = set()
        for s in sentences:
            for i, tag in enumerate(s.tags):
                if not _is_chunk_tag(tag):
                    raise task_lib.TaskDataError(
                        f"{s.path}:{s.lines[i]}: tag {tag!r} of word {s.words[i]!r} is not O or "
                        f"B-, I-, E-, S-<type>; for tags that are not chunks (e.g. POS) set "
                        f"\"encoding\": \"token\"")
                if tag != tagging_metrics.OUTSIDE:
                    types.add(tagging_metrics.split_tag(tag)[1])
        return sorted(types)

    # -- reading --------------------------------------------------------------------------------

    def split_path(self, split: str) -> str:
        """<split>.txt in the data directory (an error naming what is there when missing)."""
        return self.data_file(f"{split}.txt")

    def has_split_file(self, split: str) -> bool:
        return fs.isfile(os.path.join(self.data_dir(), f"{split}.txt"))

    def _read_path(self, path: str, check: bool = True) -> list[ConllSentence]:
        sentences = read_conll(path, self.word_column, self.tag_column, self.num_columns)
        if check:
            for s in sentences:
                self._check_tags(s)
        return sentences

    def _read(self, split: str) -> list[ConllSentence]:
        """The split's sentences; chunk tags in IOB2 whatever the file's scheme."""
        if split not in self._files:
            sentences = self._read_path(self.split_path(split))
            if self.span_tags:
                scheme = self._scheme(split, sentences)
                for sentence in sentences:
                    sentence.tags = tag_schemes.to_iob2(sentence.tags, scheme)
            self._files[split] = sentences
        return self._files[split]

    def _scheme(self, split: str, sentences: list[ConllSentence]) -> str:
        """The tag scheme of a split's file, read off its tags; a file without a chunk takes the
        training file's."""
        default = tag_schemes.IOB2 if split == "train" else self._training_scheme()
        scheme = tag_schemes.detect(sentences, default)
        if scheme != tag_schemes.IOB2:
            log.info("task %s: %s holds %s tags: read as IOB2 (the same chunks)", self.name,
                     self.split_path(split), scheme)
        self._schemes[split] = scheme
        return scheme

    def _training_scheme(self) -> str:
        if "train" not in self._schemes:
            if not self.has_split_file("train"):
                return tag_schemes.IOB2
            self._read("train")
        return self._schemes["train"]

    def _check_tags(self, sentence: ConllSentence) -> None:
        for i, tag in enumerate(sentence.tags):
            if tag not in self._valid_tags:
                if self.span_tags:
                    expected = (f"not O, B-<type> or I-<type> with a {self.name} type "
                                f"({', '.join(self.chunk_types)})")
                else:
                    expected = f"not one of the training file's tags ({', '.join(self.label_list)})"
                raise task_lib.TaskDataError(
                    f"{sentence.path}:{sentence.lines[i]}: tag {tag!r} of word "
                    f"{sentence.words[i]!r} is {expected}")

    def heldout_size(self) -> int:
        """Sentences of the training file held out as the dev set (0 with a dev file)."""
        return 0 if self.has_split_file("dev") else self.config.heldout_dev_sentences

    def _held_out(self, split: str) -> bool:
        """Whether `split` is read from the training file (train, or a dev set held out of it)."""
        return split == "train" or split == "dev" and not self.has_split_file("dev")

    def split_files(self, split: str) -> list[str]:
        """The split's file; the training file for a dev set held out of it."""
        return [self.split_path("train" if self._held_out(split) else split)]

    def _split_sentences(self, split: str) -> list[ConllSentence]:
        if not self._held_out(split):
            return self._read(split)
        train = self._read("train")
        n = self.heldout_size()
        if split == "train":
            if n >= len(train):
                raise task_lib.TaskDataError(
                    f"task {self.name}: holding out heldout_dev_sentences={n} sentences as the "
                    f"dev set leaves none of the {len(train)} in {self.split_path('train')} to "
                    f"train on")
            if n:
                self._log_holdout(train, n)
            return train[:len(train) - n]
        if n <= 0:
            raise task_lib.TaskDataError(
                f"task {self.name}: no dev file and heldout_dev_sentences is {n}; add a dev "
                f"file or hold out some training sentences")
        n = min(n, len(train) - 1)
        self._log_holdout(train, n)
        return train[len(train) - n:]

    def _log_holdout(self, train: list[ConllSentence], n: int) -> None:
        if self._logged_holdout:
            return
        self._logged_holdout = True
        heldout = train[len(train) - n:]
        log.warning("task %s: no dev file (CoNLL-2000 has no official dev set); the last %d "
                    "of %d sentences of %s (%d words, from %s) are held out of training and "
                    "used as the dev set (hparam heldout_dev_sentences)", self.name, n,
                    len(train), self.split_path("train"), sum(len(s.words) for s in heldout),
                    heldout[0].source)

    def _labels(self, tags: list[str]) -> tuple[list[str], list[str]]:
        """(tags to score against, training labels) of a sentence's tags as in the file.

        Chunk tags (IOB2 by now, whatever the file's scheme: _read) train as BIOES (or IOB2:
        `tagging_label_encoding`) and are scored as they are. Token tags are both.
        """
        if not self.span_tags:
            return tags, tags
        chunks = tagging_metrics.get_chunks(tags)
        return tags, tagging_metrics.chunks_to_tags(chunks, len(tags), self.label_encoding)

    def get_examples(self, split: str) -> list[TaggingExample]:
        if split not in self._examples:
            sentences = self._split_sentences(split)
            limit = self.max_examples(split)
            if limit is not None:
                sentences = sentences[:limit]
            examples = []
            for eid, s in enumerate(sentences):
                tags, labels = self._labels(s.tags)
                examples.append(TaggingExample(task_name=self.name, eid=eid, source=s.source,
                                               words=s.words, tags=tags, labels=labels))
            log.info("%s %s: %d sentences, %d words", self.name, split, len(examples),
                     sum(len(e.words) for e in examples))
            self._examples[split] = examples
        return self._examples[split]

    def cache_key(self) -> dict[str, Any]:
        return {"labels": self.label_list,
                "encoding": self.label_encoding if self.span_tags else "token",
                "heldout_dev_sentences": self.heldout_size(), "windows": "half-overlap-v1"}

    # -- featurizing ----------------------------------------------------------------------------

    def word_piece_ids(self, words: Sequence[str]) -> list[list[int]]:
        """Token ids of each word, at least one (an empty result becomes [UNK]) and at most
        max_seq_length - 2 (a longer word keeps its first pieces; its label sits on the first)."""
        budget = self.config.max_seq_length - 2
        tok = self._tokenizer
        return [(tok.convert_tokens_to_ids(tok.tokenize(w)) or [tok.unk_id])[:budget]
                for w in words]

    def featurize(self, example: TaggingExample, is_training: bool, log_example: bool = False):
        """One feature dict per window of the sentence (usually one)."""
        max_len = self.config.max_seq_length
        tok = self._tokenizer
        pieces = self.word_piece_ids(example.words)
        windows = plan_windows([len(p) for p in pieces], max_len - 2)
        features_list = []
        for window in windows:
            input_ids = [tok.cls_id]
            positions, labels, mask = [], [], []
            for w in range(window.start, window.end):
                positions.append(len(input_ids))
                labels.append(self._label_ids[example.labels[w]])
                mask.append(1.0 if w in window.owned else 0.0)
                input_ids += pieces[w]
            input_ids.append(tok.sep_id)
            n_tokens, n_slots = len(input_ids), len(positions)
            features = {
                "input_ids": input_ids + [tok.pad_id] * (max_len - n_tokens),
                "input_mask": [1] * n_tokens + [0] * (max_len - n_tokens),
                "segment_ids": [SEGMENT_ID] * n_tokens + [0] * (max_len - n_tokens),
                "task_id": self.task_id(),
                f"{self.name}_eid": example.eid,
                f"{self.name}_first_word": window.start,
                f"{self.name}_labels": labels + [0] * (max_len - n_slots),
                f"{self.name}_labels_mask": mask + [0.0] * (max_len - n_slots),
                f"{self.name}_labeled_positions": positions + [0] * (max_len - n_slots),
            }
            features_list.append(features)
        if log_example:
            window, features = windows[0], features_list[0]
            tokens = tok.convert_ids_to_tokens(features["input_ids"][:sum(features["input_mask"])])
            log.info("%s example %s (%s): %d word(s) in %d window(s)\n  tokens: %s\n"
                     "  labels: %s", self.name, example.eid, example.source, len(example.words),
                     len(windows), " ".join(tokens),
                     " ".join(f"{example.words[w]}/{example.labels[w]}"
                              for w in range(window.start, window.end)))
        return features_list

    def get_feature_specs(self) -> list[feature_spec.FeatureSpec]:
        length = [self.config.max_seq_length]
        return [
            feature_spec.FeatureSpec(f"{self.name}_eid", []),
            feature_spec.FeatureSpec(f"{self.name}_first_word", []),
            feature_spec.FeatureSpec(f"{self.name}_labels", length),
            feature_spec.FeatureSpec(f"{self.name}_labels_mask", length, is_int_feature=False),
            feature_spec.FeatureSpec(f"{self.name}_labeled_positions", length),
        ]

    # -- scoring and outputs --------------------------------------------------------------------

    def get_scorer(self, split: str = "dev") -> tagging_metrics.ChunkF1Scorer:
        sentences = [tagging_metrics.TaggedSentence(e.eid, e.words, e.tags, e.source)
                     for e in self.get_examples(split)]
        return tagging_metrics.ChunkF1Scorer(sentences, self.label_list, self.span_tags)

    def prediction_records(self, examples, outputs):
        """{"words": [...], "tags": [...]} per sentence (chunk tags in IOB2)."""
        scorer = tagging_metrics.ChunkF1Scorer(
            [tagging_metrics.TaggedSentence(e.eid, e.words, e.tags, e.source) for e in examples],
            self.label_list, self.span_tags)
        for row in outputs:
            scorer.update(row)
        return [{"words": e.words, "tags": scorer.predicted_tags(e.eid)} for e in examples]

    def _write_outputs(self, scorer: tagging_metrics.ChunkF1Scorer, prefix: str) -> list[str]:
        """<prefix>_predictions.txt ("word gold predicted", conlleval's input) and
        <prefix>_conlleval.txt (what conlleval prints for it)."""
        predictions, report = prefix + "_predictions.txt", prefix + "_conlleval.txt"
        io_utils.write_text(predictions, scorer.conll_text())
        io_utils.write_text(report, scorer.report())
        return [predictions, report]

    def write_eval_outputs(self, scorer, split: str, trial: int) -> list[str]:
        """The dev predictions of a trial, next to the results files."""
        return self._write_outputs(scorer, self.config.eval_output_prefix(self.name, split, trial))

    def write_test_predictions(self, outputs, split, output_dir):
        scorer = self.get_scorer(split)
        for row in outputs:
            scorer.update(row)
        return self._write_outputs(scorer, os.path.join(output_dir, f"{self.name}_{split}"))

    # -- model ----------------------------------------------------------------------------------

    def create_head(self, bert_config: modeling.BertConfig, seed: int = 0) -> heads.TaskHead:
        return TokenClassificationHead(self.name, bert_config, len(self.label_list), seed)


class Chunking(TaggingTask):
    """CoNLL-2000 text chunking: <raw_data_dir>/chunk/{train,dev,test}.txt, "word POS chunk-tag"
    lines, the eleven CoNLL-2000 chunk types (a custom tagging task with these settings)."""
    chunk_types = CONLL2000_CHUNK_TYPES

    def __init__(self, config: configure_finetuning.FinetuningConfig, tokenizer):
        super().__init__(config, "chunk", tokenizer)


class CustomTagging(TaggingTask):
    """A tagging task defined by a `custom_tasks` spec (util/task_spec.py): its files, columns,
    encoding and tag set (read from the training file unless the spec lists it)."""

    num_columns = None

    def __init__(self, config: configure_finetuning.FinetuningConfig, tokenizer, spec):
        self.spec = spec
        self.word_column = spec.get("word_column", 0)
        self.tag_column = spec.get("tag_column", -1)
        encoding = spec.get("encoding")
        self.span_tags = None if encoding is None else encoding == "span"
        self.chunk_types = tuple(spec.get("labels") or ())
        super().__init__(config, spec.name, tokenizer)

    def split_path(self, split: str) -> str:
        return task_lib.spec_file(self.spec, split)

    def has_split_file(self, split: str) -> bool:
        return split in self.spec.files

    def model_settings(self) -> dict[str, Any]:
        return {"labels": list(self.chunk_types),
                "encoding": "span" if self.span_tags else "token"}


def _is_chunk_tag(tag: str) -> bool:
    prefix, chunk_type = tagging_metrics.split_tag(tag)
    return tag == tagging_metrics.OUTSIDE or prefix in ("B", "I", "E", "S") and bool(chunk_type)


def _holds_chunk_tags(sentences: Sequence[ConllSentence]) -> bool:
    """Whether a training file holds chunk tags (B-, I-, E-, S-<type> and O) rather than plain
    per-token tags (no tag of a chunk's form).

    Raises:
      TaskDataError: chunk tags beside one that is not (a malformed tag would otherwise turn the
        whole task into per-token tagging), naming file, line and tag.
    """
    chunk = bad = None
    for s in sentences:
        for i, tag in enumerate(s.tags):
            if not _is_chunk_tag(tag):
                bad = bad or (s, i)
            elif tag != tagging_metrics.OUTSIDE:
                chunk = chunk or (s, i)
    if chunk is None:
        return False
    if bad is not None:
        (s, i), (c, j) = bad, chunk
        raise task_lib.TaskDataError(
            f"{s.path}:{s.lines[i]}: tag {s.tags[i]!r} of word {s.words[i]!r} is not O or B-, "
            f"I-, E-, S-<type>, while the file holds chunk tags ({c.path}:{c.lines[j]}: "
            f"{c.tags[j]!r}): fix the tag, or set \"encoding\": \"token\" to learn every tag "
            f"as a plain label")
    return True
