"""A small rule-based sentence splitter for cutting over-long corpus lines without losing text.

The rule: a sentence ends after ".", "!" or "?" (a run of them, optionally followed by closing
quotes or brackets) when whitespace follows and the next character is an uppercase letter, a
digit or an opening quote or bracket. A single "." does not end a sentence after a common
abbreviation ("Mr.", "Dr.", "St.", "etc.", "Jan."), a single capital initial ("J."), a dotted
abbreviation ("U.S.", "e.g.", "D.C.", "p.m.") or, before a number, "No.", "Vol.", "Fig.", "p.".

Why this and not a library: the project's dependencies are tensorflow, numpy, sentencepiece and
tqdm; pysbd, nltk's punkt (which also needs a data download) or blingfire would each add one.
The builder only needs boundaries good enough to avoid cutting examples mid-sentence, so the
rule errs towards not splitting (a missed boundary only makes a longer piece). What it must
guarantee is that no text is lost: the pieces keep the whitespace that follows them, so
"".join(split_sentences(text)) == text for every input. Plain regex, deterministic, fast.
"""
import re

# A possible end: terminal punctuation, closing quotes/brackets, then whitespace.
_CANDIDATE = re.compile(r"[.!?]+[\"'\u201d\u2019)\]]*\s+")
_OPENERS = "\"'\u201c\u2018([" + "\u00ab"
_ABBREVIATIONS = frozenset("""
    mr mrs ms dr prof sr jr st mt ft rev gen col lt sgt capt cmdr gov sen rep pres hon messrs
    vs etc al approx ca cf inc ltd co corp bros dept univ assn est jan feb mar apr jun jul aug
    sep sept oct nov dec""".split())
_BEFORE_NUMBERS = frozenset("no nos vol vols fig figs p pp art ch sec op".split())
_DOTTED = re.compile(r"(?:[A-Za-z]\.)+[A-Za-z]")  # "U.S" "e.g" "p.m" (the final "." excluded)


def split_sentences(text: str) -> list[str]:
    """Splits `text` into sentences; each keeps the whitespace after it, so joining them gives
    `text` back exactly. Text without a boundary comes back as one piece."""
    pieces = []
    start = 0
    for match in _CANDIDATE.finditer(text):
        end = match.end()
        if end == len(text) or not _starts_sentence(text[end]):
            continue
        if match.group().startswith(".") and _is_abbreviation(text, match.start(), text[end]):
            continue
        pieces.append(text[start:end])
        start = end
    if start < len(text) or not pieces:
        pieces.append(text[start:])
    return pieces


def _starts_sentence(char: str) -> bool:
    return char.isupper() or char.isdigit() or char in _OPENERS


def _is_abbreviation(text: str, dot: int, next_char: str) -> bool:
    """Whether the word ending at text[dot] == "." is an abbreviation rather than a sentence end."""
    if text[dot + 1:dot + 2] == ".":
        return False  # "..." ends a sentence
    word = text[text.rfind(" ", 0, dot) + 1:dot].lstrip(_OPENERS)
    lowered = word.lower()
    return (lowered in _ABBREVIATIONS
            or (len(word) == 1 and word.isupper())
            or (lowered in _BEFORE_NUMBERS and next_char.isdigit())
            or _DOTTED.fullmatch(word) is not None)
