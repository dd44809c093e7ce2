"""The vocabulary of a run that starts from pre-trained weights (hparam init_checkpoint).

A pre-trained model's directory carries the vocabulary it was trained with: a release download
(`electra_small/`: `checkpoint`, `electra_small.index`, `electra_small.data-*`, `vocab.txt`),
a run_pretraining.py model dir (vocab.txt or spm.model), a Hugging Face import. Fine-tuning and
continued pre-training read that one unless hparam vocab_file names another, and refuse any
vocabulary whose content differs from it, or whose size differs from the checkpoint's token
embedding table: the text would be read with token ids the model never learned. Likewise the
case: a model of ours records do_lower_case in its pretrain_config.json, and fine-tuning follows
it (a cased model's text lower-cased would be read as other tokens).
"""
import json
import logging
import os

from model import tokenization
from model.model_dir import PRETRAIN_CONFIG_FILE
from util import checkpoint, fs, io_utils
from util.hparams import HParamError

log = logging.getLogger(__name__)

# The token embedding table every ELECTRA/BERT checkpoint holds (official names).
TABLE = "electra/embeddings/word_embeddings"


def checkpoint_dir(init_checkpoint: str) -> str:
    """The directory a checkpoint lives in: `init_checkpoint` itself when it is a directory,
    else the directory of the prefix (`electra_small/electra_small` -> `electra_small`)."""
    if fs.isdir(init_checkpoint):
        return init_checkpoint
    return os.path.dirname(init_checkpoint.rstrip("/")) or "."


def checkpoint_vocab(init_checkpoint: str | None) -> str | None:
    """The vocabulary beside the checkpoint (vocab.txt or spm.model in its directory), if any."""
    if not init_checkpoint:
        return None
    return tokenization.find_vocab_file(checkpoint_dir(init_checkpoint))


def _same(a: str, b: str) -> bool:
    return fs.same_place(a, b) or fs.same_content(a, b)


def _differs(path: str, own: str) -> str:
    """How vocabulary `path` differs from the model's `own`: its size, else its content."""
    size, own_size = (len(tokenization.load_vocab(p)) for p in (path, own))
    if size != own_size:
        return (f"{path} has {size} tokens, the vocabulary the pre-trained model was trained "
                f"with ({own}) {own_size}")
    return (f"{path} is not the vocabulary the pre-trained model was trained with ({own}, other "
            "content)")


def choose(vocab_file: str | None, init_checkpoint: str | None, found: list[str | None],
           missing: str) -> str:
    """The run's vocabulary: hparam `vocab_file`; unset, the one beside `init_checkpoint`, else
    the first existing path of `found` (the run's other default places, in order), else
    `missing` (the path whose absence the run then reports).

    Raises:
      HParamError: `vocab_file`, or without it a vocabulary of `found`, differs from the one
        beside the checkpoint (named with both files and what to set).
    """
    own = checkpoint_vocab(init_checkpoint)
    if vocab_file is not None:
        if own is not None and fs.isfile(vocab_file) and not _same(vocab_file, own):
            raise HParamError(
                f"hparam 'vocab_file' {_differs(vocab_file, own)}: the text would be read with "
                f"other token ids. Leave vocab_file unset to use {own} (the vocabulary beside "
                f"init_checkpoint {init_checkpoint})")
        return vocab_file
    existing = [path for path in found if path and fs.isfile(path)]
    if own is None:
        return existing[0] if existing else missing
    for other in existing:
        if not _same(other, own):
            raise HParamError(
                f"{_differs(other, own)}; both are default vocabularies of this run (hparam "
                f"vocab_file unset; init_checkpoint {init_checkpoint} comes with {own}). Set "
                f"\"vocab_file\": \"{own}\" to use the checkpoint's, the one the model was "
                f"trained with, or point init_checkpoint at the model {other} belongs to")
    return own


def table_rows(init_checkpoint: str) -> int | None:
    """Rows of the checkpoint's token embedding table; None when there is no readable
    checkpoint or no table (restoring it reports that)."""
    try:
        prefix = checkpoint.resolve(init_checkpoint)
        shape = checkpoint.load(prefix).get_variable_to_shape_map().get(TABLE)
    except (FileNotFoundError, ValueError):
        return None
    return int(shape[0]) if shape else None


def check_size(vocab_file: str, n_tokens: int, init_checkpoint: str | None) -> None:
    """Refuses a vocabulary of another size than the checkpoint's token embedding table. The
    checkpoint's own vocabulary may be smaller (a table padded past it), with a warning.

    Raises:
      HParamError: the sizes differ, naming the vocabulary and the checkpoint.
    """
    rows = table_rows(init_checkpoint) if init_checkpoint else None
    if rows is None or rows == n_tokens:
        return
    own = checkpoint_vocab(init_checkpoint)
    if n_tokens < rows and own is not None and _same(vocab_file, own):
        log.warning("vocabulary %s has %d tokens, the embedding table of init_checkpoint %s has "
                    "%d rows: the last rows are never read", vocab_file, n_tokens,
                    init_checkpoint, rows)
        return
    raise HParamError(
        f"vocabulary {vocab_file} has {n_tokens} tokens but the token embedding table of "
        f"init_checkpoint {init_checkpoint} ({TABLE}) has {rows} rows: it is not the vocabulary "
        f"the model was trained with. Set \"vocab_file\" to that vocabulary (and \"vocab_size\": "
        f"{rows})")


def recorded_lower_case(init_checkpoint: str | None) -> tuple[bool | None, str | None]:
    """(do_lower_case, file) as the pre-trained model's pretrain_config.json records it; (None,
    None) for a model without one (a release download, an import)."""
    if not init_checkpoint:
        return None, None
    path = os.path.join(checkpoint_dir(init_checkpoint), PRETRAIN_CONFIG_FILE)
    if not fs.isfile(path):
        return None, None
    try:
        value = io_utils.read_json(path).get("do_lower_case")
    except (ValueError, AttributeError):
        return None, None  # unreadable settings: the run reports what it needs from them
    return (value, path) if isinstance(value, bool) else (None, None)


def lower_case(do_lower_case: bool | None, init_checkpoint: str | None) -> bool:
    """Whether the run lower-cases its text: hparam do_lower_case; unset, as the pre-trained
    model was trained (its pretrain_config.json), else true, as the uncased releases need.

    Raises:
      HParamError: do_lower_case contradicts the model's pretrain_config.json (naming it).
    """
    recorded, path = recorded_lower_case(init_checkpoint)
    if do_lower_case is None:
        return True if recorded is None else recorded
    if recorded is not None and recorded != do_lower_case:
        raise HParamError(
            f"hparam do_lower_case is {json.dumps(do_lower_case)} but the pre-trained model was "
            f"trained with do_lower_case {json.dumps(recorded)} ({path}): its vocabulary would "
            "read the text as other tokens than in pre-training. Leave do_lower_case unset to "
            "follow the model")
    return do_lower_case
