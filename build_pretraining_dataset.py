"""Turns a directory of raw text into ELECTRA pre-training tfrecords.

Output: <output-dir>/pretrain_data.tfrecord-<i>-of-<n> shards of tf.train.Examples with int64
features input_ids, input_mask and segment_ids (the official release's format, interchangeable
with it), plus metadata.json (vocabulary and its hash, casing, counts per shard, and the
held-out "eval_files" that pre-training must not train on).

Examples:
  python build_pretraining_dataset.py --corpus-dir my_text/ \\
      --vocab-file data/vocab.txt --output-dir data/pretrain_tfrecords \\
      --num-processes 2
  python build_pretraining_dataset.py --corpus-dir my_text/ --vocab-size 16000 \\
      --output-dir data/pretrain_tfrecords        # trains a SentencePiece vocabulary first

Exit status: 0 done, 2 bad input or settings, 4 a worker process died (e.g. killed by the
out-of-memory killer); complete shards are kept and re-running the same command resumes.
"""
import argparse
import logging
import sys
import textwrap

from util import console  # first: keeps TensorFlow's start-up lines off the console

from pretrain.builder import corpus, dataset_builder
from util import training_utils, workers

_TRUE = {"true", "t", "yes", "y", "1", "on"}
_FALSE = {"false", "f", "no", "n", "0", "off"}


def parse_bool(value: str) -> bool:
    """A real boolean flag value: the official script's type=bool turned "False" into True."""
    lowered = value.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {value!r}")


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Keeps flags like --no-lower-case in one piece when wrapping help text."""

    def _split_lines(self, text: str, width: int) -> list[str]:
        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=_HelpFormatter)
    _add_input_flags(parser)
    _add_output_flags(parser)
    _add_text_flags(parser)
    _add_run_flags(parser)
    console.add_verbose_flag(parser)
    return parser


def _add_input_flags(parser: argparse.ArgumentParser) -> None:
    """The corpus and its vocabulary."""
    parser.add_argument(
        "--corpus-dir", required=True,
        help="Directory tree of raw text: UTF-8 files with one sentence or paragraph per line and "
             "blank lines between documents; gzip/bzip2/xz-compressed files and tar archives "
             "(OpenWebText layout: one document per archive member) are read as well. Hidden "
             "files are ignored. Example: --corpus-dir my_text/")
    vocab = parser.add_argument_group("vocabulary (give exactly one)")
    vocab.add_argument(
        "--vocab-file",
        help="WordPiece vocab.txt (one token per line; must contain [PAD] [UNK] [CLS] [SEP] "
             "[MASK]). Example: --vocab-file data/vocab.txt")
    vocab.add_argument(
        "--spm-model",
        help="SentencePiece .model file with the pieces [PAD] [UNK] [CLS] [SEP] [MASK]. "
             "Example: --spm-model data/spm.model")
    vocab.add_argument(
        "--vocab-size", type=int,
        help="Train a SentencePiece vocabulary of this many pieces on the corpus first; it is "
             "written to <output-dir>/spm.model with [PAD] [UNK] [CLS] [SEP] [MASK] at ids 0-4. "
             "Example: --vocab-size 16000")


def _add_output_flags(parser: argparse.ArgumentParser) -> None:
    """Where the shards go, how many and how long their examples are."""
    parser.add_argument(
        "--output-dir", required=True,
        help="Where the shards and metadata.json go. A re-run with the same settings resumes "
             "(complete shards are kept); a directory with shards of other settings is refused. "
             "Example: --output-dir data/pretrain_tfrecords")
    parser.add_argument(
        "--max-seq-length", type=int, default=128,
        help="Tokens per example including [CLS] and [SEP]s (default 128). Example: --max-seq-length 512")
    parser.add_argument(
        "--num-processes", type=int, default=1,
        help="Worker processes (default 1). The output does not depend on it. Example: --num-processes 2")
    parser.add_argument(
        "--num-out-files", type=int, default=None,
        help="Number of output shards. Default: chosen from the corpus size (about 32 MB of text "
             "per shard, at least 4 per process and enough for a small held-out split), and "
             "printed; a resumed build keeps its earlier count. Example: --num-out-files 1000")


def _add_text_flags(parser: argparse.ArgumentParser) -> None:
    """How the text is split into documents, truncated and normalised."""
    parser.add_argument(
        "--blanks-separate-docs", type=parse_bool, nargs="?", const=True, default=None,
        metavar="BOOL",
        help="Whether blank lines end a document (true/false). Default: true in text files, "
             "false inside archive members (each member is one document, as for OpenWebText). "
             "Example: --blanks-separate-docs false")
    parser.add_argument(
        "--no-blanks-separate-docs", dest="blanks_separate_docs", action="store_false",
        help="Same as --blanks-separate-docs false. Example: --no-blanks-separate-docs")
    parser.add_argument(
        "--official-truncation", action="store_true",
        help="Cut each example to --max-seq-length and drop the rest, as the official script "
             "does, for exact reproduction. By default nothing is dropped: lines longer than an "
             "example are split at sentence boundaries and what does not fit in one example "
             "continues in the next (on a corpus with one paragraph per line the official rule "
             "drops about 28%% of the tokens at length 128). Example: --official-truncation")
    parser.add_argument(
        "--do-lower-case", dest="do_lower_case", action="store_true", default=True,
        help="Lower-case the text (the default, as in the official script and the do_lower_case "
             "hparam of pre-training and fine-tuning; matches the uncased vocab). "
             "Example: --vocab-size 16000 --do-lower-case")
    parser.add_argument(
        "--no-lower-case", dest="do_lower_case", action="store_false",
        help="Keep case (for cased vocabularies; then set the do_lower_case hparam to false "
             "for pre-training, which refuses these tfrecords otherwise; fine-tuning follows "
             "the pre-trained model). Example: --vocab-file cased-vocab.txt --no-lower-case")
    parser.add_argument(
        "--strip-accents", "--do-strip-accents", dest="strip_accents", action="store_true",
        default=None,
        help="Remove accents (WordPiece only). Default: follow the lower-casing setting, as BERT. "
             "Example: --no-lower-case --strip-accents")
    parser.add_argument(
        "--no-strip-accents", dest="strip_accents", action="store_false",
        help="Keep accents even when lower-casing (WordPiece only). Example: --no-strip-accents")


def _add_run_flags(parser: argparse.ArgumentParser) -> None:
    """The held-out split, the seed, bad files and progress."""
    parser.add_argument(
        "--eval-fraction", type=float, default=0.02,
        help="Share of the corpus (whole files or document ranges) held out in separate shards "
             "for pre-training evaluation, listed as eval_files in metadata.json; at least one "
             "shard when there are two or more; 0 disables (default 0.02). Example: --eval-fraction 0.05")
    parser.add_argument(
        "--seed", type=int, default=12345,
        help="Seed for file order, segment splits and shuffling; same seed, same output "
             "(default 12345). Example: --seed 1")
    parser.add_argument(
        "--skip-bad-files", action="store_true",
        help="Skip (and list in metadata.json) files that are not UTF-8 or cannot be "
             "decompressed, instead of stopping at the first one; each file is checked by a fast "
             "decode pass before use. Example: --skip-bad-files")
    parser.add_argument(
        "--no-progress", dest="show_progress", action="store_false",
        help="No progress bar (the summary line is still printed). Example: --no-progress")


def main(argv: list[str] | None = None) -> int:
    args = make_parser().parse_args(argv)
    console.setup(args.verbose, logging.WARNING, "%(levelname)s %(message)s")
    config = dataset_builder.BuildConfig(
        corpus_dir=args.corpus_dir, output_dir=args.output_dir, vocab_file=args.vocab_file,
        spm_model=args.spm_model, vocab_size=args.vocab_size, do_lower_case=args.do_lower_case,
        strip_accents=args.strip_accents, max_seq_length=args.max_seq_length,
        num_processes=args.num_processes, blanks_separate_docs=args.blanks_separate_docs,
        num_out_files=args.num_out_files, eval_fraction=args.eval_fraction, seed=args.seed,
        skip_bad_files=args.skip_bad_files, official_truncation=args.official_truncation,
        show_progress=args.show_progress)
    try:
        dataset_builder.build_dataset(config)
    except (dataset_builder.BuildError, corpus.CorpusError, ValueError, OSError,
            training_utils.RunLockError) as e:  # OSError: unwritable or full output dir
        print(f"error: {e}", file=sys.stderr)
        return 2
    except workers.WorkerDied as e:
        print(f"error: {e}. The shards completed so far are kept: re-run the same command to "
              f"build the rest (with fewer --num-processes if memory ran out)", file=sys.stderr)
        return workers.EXIT_WORKER_DIED
    return 0


if __name__ == "__main__":
    sys.exit(main())
