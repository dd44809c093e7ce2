"""What reaches a user's terminal: the command's own story, not TensorFlow's.

By default TensorFlow's C++ start-up lines (CPU features, oneDNN, absl's preamble), its Python
warnings (retracing, deprecations) and whole-config dumps stay off the console; `--verbose`
brings them all back, and an explicitly set TF_CPP_MIN_LOG_LEVEL is always respected.

TensorFlow reads TF_CPP_MIN_LOG_LEVEL once, when its library loads, so this module sets it when
it is imported: every command imports it before anything that imports tensorflow. Some lines
ignore that level: on CPUs where oneDNN's custom operations are on (AVX-512, or
TF_ENABLE_ONEDNN_OPTS=1), TensorFlow 2.21 logs them through absl before absl is initialised, and
absl then writes everything to stderr. So this module also imports TensorFlow itself, with the
process's stderr (file descriptor 2, which C++ writes to) caught in a file, and passes on what
was written there except absl lines below the level.
"""
import argparse
import logging
import os
import re
import sys
import tempfile
import warnings

VERBOSE_FLAG = "--verbose"
QUIET_TF_CPP_LEVEL = "2"  # C++ INFO and WARNING lines hidden; errors still shown

_verbose = False

# absl's line prefix: severity and date (MMDD), time (before initialisation: 00:00:<epoch>),
# thread, file:line].
_ABSL_LINE = re.compile(r"^([IWEF])\d{4} \d\d:\d\d:\d+\.\d+\s+\d+ [^\]]*\] ")
_ABSL_PREAMBLE = "WARNING: All log messages before absl::InitializeLog() is called"
_SEVERITY = {"I": 0, "W": 1, "E": 2, "F": 3}


def filter_startup_lines(text: str, min_level: int) -> str:
    """`text` without absl records below `min_level` (0 INFO .. 3 FATAL, as TF_CPP_MIN_LOG_LEVEL),
    their continuation lines, and absl's pre-initialisation preamble; all else kept in order."""
    kept = []
    dropping = False
    for line in text.splitlines(keepends=True):
        if line.startswith(_ABSL_PREAMBLE):
            continue
        record = _ABSL_LINE.match(line)
        if record:
            dropping = _SEVERITY[record.group(1)] < min_level
        elif dropping and line.strip() and not line.startswith("Traceback"):
            continue  # the rest of a dropped multi-line record
        else:
            dropping = False
        if not dropping:
            kept.append(line)
    return "".join(kept)


def _import_tensorflow_with_startup_lines_filtered(min_level: int) -> None:
    sys.stderr.flush()
    saved_fd = os.dup(2)
    with tempfile.TemporaryFile() as caught:
        os.dup2(caught.fileno(), 2)
        try:
            import tensorflow  # noqa: F401  (the import is the point)
        finally:
            os.dup2(saved_fd, 2)
            os.close(saved_fd)
            caught.seek(0)
            text = caught.read().decode("utf-8", errors="replace")
            sys.stderr.write(filter_startup_lines(text, min_level))
            sys.stderr.flush()


def _quiet_level() -> int | None:
    """The level below which TensorFlow's C++ lines stay off the console; None shows them all."""
    if VERBOSE_FLAG in sys.argv[1:] and "TF_CPP_MIN_LOG_LEVEL" not in os.environ:
        return None
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", QUIET_TF_CPP_LEVEL)
    try:
        level = int(os.environ["TF_CPP_MIN_LOG_LEVEL"])
    except ValueError:
        return None
    return level if level > 0 else None


_level = _quiet_level()
if _level is not None and "tensorflow" not in sys.modules:
    _import_tensorflow_with_startup_lines_filtered(_level)


def add_verbose_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(VERBOSE_FLAG, action="store_true",
                        help="also show TensorFlow's start-up lines and warnings (e.g. "
                             "retracing) and the whole config (it is always written to the "
                             "model dir)")


def setup(verbose: bool = False, level: int = logging.INFO,
          fmt: str = "%(asctime)s %(levelname)s %(message)s") -> None:
    """Logging to stderr at `level`; TensorFlow's and absl's Python loggers and warnings only
    with `verbose` (their errors always)."""
    global _verbose
    _verbose = verbose
    logging.basicConfig(level=level, format=fmt, stream=sys.stderr)
    third_party = logging.NOTSET if verbose else logging.ERROR
    for name in ("tensorflow", "absl"):
        logging.getLogger(name).setLevel(third_party)
    if not verbose:
        for module in ("tensorflow", "keras", "absl", "tf_keras"):
            warnings.filterwarnings("ignore", module=module + r"(\.|$)")


def verbose() -> bool:
    """Whether the command was asked for the verbose console (whole configs, TF's lines)."""
    return _verbose
