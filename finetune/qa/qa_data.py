"""Reading QA data: SQuAD 1.1/2.0 JSON and MRQA 2019 JSONL files -> `QAExample`s.

Formats (the official ones):
  SQuAD  {"version": ..., "data": [{"title", "paragraphs": [{"context", "qas": [{"id",
          "question", "answers": [{"text", "answer_start"}], "is_impossible" (2.0)}]}]}]}
  MRQA   one JSON object per line, the first may be {"header": ...}; each line {"context",
          "qas": [{"qid", "question", "answers": [str], "detected_answers": [{"text",
          "char_spans": [[start, end]] (inclusive)}]}]}; also read gzipped (.jsonl.gz).

Contexts are split into words on whitespace (the official definition: space, tab, CR, LF and
U+202F; other Unicode spaces stay inside words and are handled by the tokenizer), and each
character is mapped to its word. A training answer becomes a (start word, end word) pair from
its character offset. As the official release, a training question is skipped (and counted)
when the words at its offset do not contain its text; in every split, answers whose text differs
from the context at their offset are counted and reported with their question ids. Input that
does not follow the schema raises QADataError naming the file and the article / paragraph /
question (or line) where it goes wrong.
"""
import dataclasses
import gzip
import json
import logging
import zlib
from typing import Any, Iterator

from finetune import task as task_lib
from util import fs

log = logging.getLogger(__name__)

# Question ids quoted per kind of data problem in the log.
MAX_REPORTED_IDS = 5


class QADataError(task_lib.TaskDataError):
    """QA data that does not follow the SQuAD / MRQA schema; the message names where."""


@dataclasses.dataclass
class QAExample(task_lib.Example):
    """One question on one context.

    doc_tokens: the context's whitespace-separated words (shared by a paragraph's questions).
    start_position / end_position: word indices of the training answer (-1 for unanswerable
      questions, None outside training).
    gold_answers: every accepted answer text (evaluation; empty for unanswerable questions).
    """
    qas_id: str = ""
    question_text: str = ""
    doc_tokens: list[str] = dataclasses.field(default_factory=list)
    orig_answer_text: str | None = None
    start_position: int | None = None
    end_position: int | None = None
    is_impossible: bool = False
    gold_answers: list[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class DataReport:
    """Problems found while reading one split, reported rather than raised."""
    n_examples: int = 0
    answer_mismatches: int = 0  # questions with an answer whose text is not at its offset
    mismatch_ids: list[str] = dataclasses.field(default_factory=list)
    skipped: int = 0  # training questions whose answer could not be located (not used)
    skipped_ids: list[str] = dataclasses.field(default_factory=list)

    def add_mismatch(self, qas_id: str) -> None:
        self.answer_mismatches += 1
        if len(self.mismatch_ids) < MAX_REPORTED_IDS:
            self.mismatch_ids.append(qas_id)

    def add_skipped(self, qas_id: str) -> None:
        self.skipped += 1
        if len(self.skipped_ids) < MAX_REPORTED_IDS:
            self.skipped_ids.append(qas_id)

    def log(self, where: str) -> None:
        log.info("%s: %d examples", where, self.n_examples)
        if self.answer_mismatches:
            log.warning("%s: %d question(s) have an answer whose text is not the context at "
                        "its answer_start (e.g. %s)", where, self.answer_mismatches,
                        ", ".join(self.mismatch_ids))
        if self.skipped:
            log.warning("%s: skipped %d training question(s) whose answer text is not found "
                        "at its offset (e.g. %s)", where, self.skipped,
                        ", ".join(self.skipped_ids))


def is_whitespace(c: str) -> bool:
    """The official QA word separator: space, tab, CR, LF and narrow no-break space U+202F."""
    return c in " \t\r\n" or ord(c) == 0x202F


def split_words(context: str) -> tuple[list[str], list[int]]:
    """context -> (words, word index of every character); whitespace maps to the word before it
    (-1 before the first word)."""
    words: list[str] = []
    char_to_word: list[int] = []
    in_space = True
    for c in context:
        if is_whitespace(c):
            in_space = True
        else:
            if in_space:
                words.append(c)
            else:
                words[-1] += c
            in_space = False
        char_to_word.append(len(words) - 1)
    return words, char_to_word


# -- schema checks ----------------------------------------------------------------------------


def _require(obj: Any, key: str, kind: type | tuple[type, ...], where: str,
             optional: bool = False) -> Any:
    """obj[key] checked to be of `kind`; QADataError naming `where` otherwise."""
    if not isinstance(obj, dict):
        raise QADataError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    if key not in obj:
        if optional:
            return None
        raise QADataError(f"{where}: missing key {key!r}")
    value = obj[key]
    # bool is an int to Python; answer offsets and ids must not be booleans.
    if not isinstance(value, kind) or (isinstance(value, bool) and bool not in (
            kind if isinstance(kind, tuple) else (kind,))):
        names = "/".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
        raise QADataError(f"{where}: {key!r} must be {names}, got {type(value).__name__} "
                          f"{_short(value)}")
    return value


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 60 else text[:57] + "..."


@dataclasses.dataclass
class _Answer:
    text: str
    start: int | None  # character offset, None when unknown
    end: int | None = None  # inclusive end offset when the format gives one (MRQA)

    def matches(self, context: str) -> bool:
        """Whether the context holds exactly this text at this offset."""
        if self.start is None:
            return True
        end = self.start + len(self.text) if self.end is None else self.end + 1
        return 0 <= self.start and context[self.start:end] == self.text


@dataclasses.dataclass
class _Question:
    qas_id: str
    question: str
    answers: list[_Answer]  # answers used to train (SQuAD answers / MRQA detected answers)
    gold: list[str]  # texts evaluated against
    is_impossible: bool
    where: str


SQUAD2_HINT = "use task 'squad' for SQuAD 2.0 data"


def _squad_questions(paragraph: dict, where: str, v2: bool, labeled: bool,
                     v2_hint: str) -> list[_Question]:
    questions = []
    for k, qa in enumerate(_require(paragraph, "qas", list, where)):
        qa_where = f"{where} qas[{k}]"
        qas_id = _require(qa, "id", str, qa_where)
        qa_where += f" (id {qas_id!r})"
        question = _require(qa, "question", str, qa_where)
        raw_answers = _require(qa, "answers", list, qa_where, optional=not labeled) or []
        answers = []
        for a, answer in enumerate(raw_answers):
            a_where = f"{qa_where} answers[{a}]"
            answers.append(_Answer(_require(answer, "text", str, a_where),
                                   _require(answer, "answer_start", int, a_where)))
        is_impossible = False
        if v2:
            flag = _require(qa, "is_impossible", bool, qa_where, optional=True)
            is_impossible = (not answers) if flag is None else flag
            if labeled and not is_impossible and not answers:
                raise QADataError(f"{qa_where}: is_impossible is false but 'answers' is empty")
        elif labeled and not answers:
            raise QADataError(f"{qa_where}: 'answers' is empty (SQuAD 1.1 questions all have "
                              f"answers; {v2_hint})")
        gold = [] if is_impossible else [a.text for a in answers]
        questions.append(_Question(qas_id, question, [] if is_impossible else answers, gold,
                                   is_impossible, qa_where))
    return questions


def _mrqa_questions(line: dict, where: str, labeled: bool, v2: bool,
                    v2_hint: str | None) -> list[_Question]:
    questions = []
    for k, qa in enumerate(_require(line, "qas", list, where)):
        qa_where = f"{where} qas[{k}]"
        qid = _require(qa, "qid", str, qa_where)
        qa_where += f" (qid {qid!r})"
        question = _require(qa, "question", str, qa_where)
        gold = _require(qa, "answers", list, qa_where, optional=not labeled) or []
        for a, text in enumerate(gold):
            if not isinstance(text, str):
                raise QADataError(f"{qa_where} answers[{a}]: must be a string, got "
                                  f"{type(text).__name__} {_short(text)}")
        is_impossible = False
        if v2:
            flag = _require(qa, "is_impossible", bool, qa_where, optional=True)
            is_impossible = (not gold) if flag is None else flag
        if labeled and not gold and not is_impossible:
            raise QADataError(f"{qa_where}: 'answers' is empty"
                              + (f" ({v2_hint})" if v2_hint and not v2 else ""))
        answers = []
        detected = _require(qa, "detected_answers", list, qa_where, optional=True) or []
        for a, answer in enumerate(detected):
            a_where = f"{qa_where} detected_answers[{a}]"
            text = _require(answer, "text", str, a_where)
            spans = _require(answer, "char_spans", list, a_where)
            for s, span in enumerate(spans):
                if (not isinstance(span, list) or len(span) != 2 or
                        not all(isinstance(x, int) and not isinstance(x, bool) for x in span)):
                    raise QADataError(f"{a_where} char_spans[{s}]: expected [start, end] "
                                      f"integers, got {_short(span)}")
            # The official reader trains on the first occurrence of the first detected answer.
            answers.append(_Answer(text, *(spans[0] if spans else (None, None))))
        questions.append(_Question(qid, question, [] if is_impossible else answers,
                                   [] if is_impossible else list(gold), is_impossible,
                                   qa_where))
    return questions


# -- readers ----------------------------------------------------------------------------------


def iter_squad(path: str, v2: bool, labeled: bool, v2_hint: str = SQUAD2_HINT
               ) -> Iterator[tuple[str, list[_Question]]]:
    """(context, questions) per paragraph of a SQuAD JSON file; `v2_hint` says how to read
    unanswerable questions when they are found in v1 data."""
    try:
        with fs.open(path, encoding="utf-8-sig") as f:
            text = f.read()
    except UnicodeDecodeError as e:
        raise task_lib.not_utf8_error(path, e) from None
    try:
        dataset = json.loads(text)
    except json.JSONDecodeError as e:
        raise QADataError(f"{path}:{e.lineno}:{e.colno}: invalid JSON: {e.msg}") from None
    articles = _require(dataset, "data", list, path)
    for i, article in enumerate(articles):
        where = f"{path}: data[{i}]"
        title = article.get("title") if isinstance(article, dict) else None
        if isinstance(title, str):
            where += f" (title {title!r})"
        for j, paragraph in enumerate(_require(article, "paragraphs", list, where)):
            p_where = f"{where} paragraphs[{j}]"
            context = _require(paragraph, "context", str, p_where)
            yield context, _squad_questions(paragraph, p_where, v2, labeled, v2_hint)


def iter_mrqa(path: str, labeled: bool, v2: bool = False,
              v2_hint: str | None = None
              ) -> Iterator[tuple[str, list[_Question]]]:
    """(context, questions) per line of an MRQA JSONL(.gz) file; the header line is skipped."""
    with fs.open_maybe_gzip(path, encoding="utf-8-sig") as f:
        try:
            for number, line in enumerate(f, start=1):
                if not line.strip():
                    continue
                where = f"{path}:{number}"
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as e:
                    raise QADataError(f"{where}:{e.colno}: invalid JSON: {e.msg}") from None
                if isinstance(obj, dict) and "header" in obj:
                    continue
                context = _require(obj, "context", str, where)
                yield context, _mrqa_questions(obj, where, labeled, v2, v2_hint)
        except UnicodeDecodeError as e:
            raise task_lib.not_utf8_error(path, e) from None
        except (EOFError, gzip.BadGzipFile, zlib.error) as e:  # a cut-off or damaged download
            raise QADataError(f"{path}: damaged gzip file ({e})") from None


def iter_plain_questions(records: Iterator[tuple[str, dict]]
                         ) -> Iterator[tuple[str, list[_Question]]]:
    """(context, [question]) per {"context", "question", optional "id"} object (predict.py's
    JSONL input); `records` yields (where, object). The id defaults to the line's where."""
    for where, obj in records:
        context = _require(obj, "context", str, where)
        question = _require(obj, "question", str, where)
        qas_id = _require(obj, "id", (str, int), where, optional=True)
        qas_id = where if qas_id is None else str(qas_id)
        yield context, [_Question(qas_id, question, [], [], False, where)]


def build_examples(paragraphs: Iterator[tuple[str, list[_Question]]], task_name: str,
                   is_training: bool, max_examples: int | None = None
                   ) -> tuple[list[QAExample], DataReport]:
    """QAExamples (eid = position) from parsed paragraphs, plus what was wrong with the data."""
    examples: list[QAExample] = []
    report = DataReport()
    first_seen: dict[str, str] = {}
    for context, questions in paragraphs:
        if max_examples is not None and len(examples) >= max_examples:
            break
        words, char_to_word = split_words(context)
        for q in questions:
            if max_examples is not None and len(examples) >= max_examples:
                break
            if q.qas_id in first_seen:
                raise QADataError(f"{q.where}: question id {q.qas_id!r} already used at "
                                  f"{first_seen[q.qas_id]}")
            first_seen[q.qas_id] = q.where
            if not all(answer.matches(context) for answer in q.answers):
                report.add_mismatch(q.qas_id)
            example = QAExample(task_name=task_name, eid=len(examples), source=q.where,
                                qas_id=q.qas_id, question_text=q.question, doc_tokens=words,
                                is_impossible=q.is_impossible, gold_answers=q.gold)
            if is_training and not _locate_answer(example, q, context, char_to_word):
                report.add_skipped(q.qas_id)
                continue
            examples.append(example)
    report.n_examples = len(examples)
    return examples, report


def _locate_answer(example: QAExample, q: _Question, context: str,
                   char_to_word: list[int]) -> bool:
    """Sets the training answer's words; False when it cannot be recovered from the context."""
    if q.is_impossible:
        example.start_position = example.end_position = -1
        example.orig_answer_text = ""
        return True
    if not q.answers or q.answers[0].start is None:
        return False
    answer = q.answers[0]
    first, last = answer.start, answer.start + len(answer.text) - 1
    if not answer.text or first < 0 or last >= len(context):
        return False
    start, end = char_to_word[first], char_to_word[last]
    if start < 0 or end < start:  # the offset points at leading whitespace
        return False
    # As the official reader: keep the question only if the (lower-cased) words of the span
    # contain the answer text; otherwise the offset is wrong or Unicode got in the way.
    span_text = " ".join(example.doc_tokens[start:end + 1]).lower()
    if " ".join(answer.text.split()).lower() not in span_text:
        return False
    example.start_position, example.end_position = start, end
    example.orig_answer_text = answer.text
    return True
