"""What reaches a user's terminal: the command's own story, not TensorFlow's.

By default TensorFlow's C++ start-up lines (CPU features, oneDNN, absl's preamble), its Python
warnings (retracing, deprecations) and whole-config dumps stay off the console; `--verbose`
brings them all back, and an explicitly set TF_CPP_MIN_LOG_LEVEL is always respected.

TensorFlow reads TF_CPP_MIN_LOG_LEVEL once, when its library loads, so this module sets it when
it is imported: every command imports it before anything that imports tensorflow.
"""
import argparse
import logging
import os
import sys
import warnings

VERBOSE_FLAG = "--verbose"
QUIET_TF_CPP_LEVEL = "2"  # C++ INFO and WARNING lines hidden; errors still shown

_verbose = False

if "TF_CPP_MIN_LOG_LEVEL" not in os.environ and VERBOSE_FLAG not in sys.argv[1:]:
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = QUIET_TF_CPP_LEVEL


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
