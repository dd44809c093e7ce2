"""Reading a model directory: architecture, checkpoint and vocabulary, whoever wrote it.

Three layouts are understood:

- pre-training (run_pretraining.py, or export_model.py's Hugging Face import): bert_config.json,
  generator_config.json (if there is a generator), pretrain_config.json, vocab.txt, checkpoints;
- a fine-tuning trial (run_finetuning.py, `<model_dir>_<trial>`): finetune_config.json (its
  "bert_config" and "training_settings"), checkpoints; the vocabulary sits two levels up, in the
  pre-trained model dir (`<pretrained>/finetuning_models/<tasks>_model_<trial>`);
- an official release directory (checkpoint + vocab.txt, no config): layers and sizes are read
  off the tensor shapes; the number of attention heads, which no shape shows, must be stated
  (--num-attention-heads; the generator's: --generator-num-attention-heads).
A pre-training dir without bert_config.json is rebuilt from its pretrain_config.json, checked
against the checkpoint's shapes. Nothing is guessed: what no file states is refused, named.
"""
import dataclasses
import os
import re
from typing import Callable, TypeVar

from model import modeling, tokenization
from util import checkpoint, fs, io_utils

BERT_CONFIG_FILE = "bert_config.json"
GENERATOR_CONFIG_FILE = "generator_config.json"
PRETRAIN_CONFIG_FILE = "pretrain_config.json"
FINETUNE_CONFIG_FILE = "finetune_config.json"
VOCAB_FILE = "vocab.txt"

T = TypeVar("T")


@dataclasses.dataclass
class ModelDir:
    path: str
    kind: str  # "pretrained" or "finetuned"
    bert_config: modeling.BertConfig  # the discriminator / fine-tuned encoder
    generator_config: modeling.BertConfig | None
    checkpoint: str  # prefix of the checkpoint to use
    vocab_file: str | None
    do_lower_case: bool
    settings: dict  # pretrain_config.json, or the fine-tuning "training_settings"
    notes: list  # where the architecture was read from, when not from its config files
    # The directory `checkpoint` was chosen from as its newest (None: the user named it).
    checkpoint_dir: str | None = None
    # Why the checkpoint's generator has no generator_config (None: known, or no generator).
    generator_unknown: str | None = None

    def read_checkpoint(self, read: Callable[[str], T]) -> T:
        """read(prefix) of the model's checkpoint. If a run training in `checkpoint_dir` pruned
        it meanwhile (keep_checkpoint_max), the then-newest one is read, and `checkpoint`
        names it from then on."""
        self.checkpoint, result = checkpoint.read_newest(self.checkpoint, self.checkpoint_dir,
                                                         read)
        return result


# The sizes a checkpoint's shapes show; the heads (and the activation) no shape shows.
SHAPE_KEYS = ("vocab_size", "embedding_size", "hidden_size", "num_hidden_layers",
              "intermediate_size", "max_position_embeddings", "type_vocab_size")
HEADS_FLAG, GENERATOR_HEADS_FLAG = "--num-attention-heads", "--generator-num-attention-heads"


def shape_sizes(shapes: dict[str, list[int]], scope: str = "electra",
                emb_scope: str | None = None) -> dict[str, int]:
    """The SHAPE_KEYS of the encoder under `scope`, from checkpoint tensor shapes (name ->
    shape).

    Raises:
      ValueError: the tensors do not hold such an encoder.
    """
    emb_scope = emb_scope or scope
    table = f"{emb_scope}/embeddings/word_embeddings"
    query = f"{scope}/encoder/layer_0/attention/self/query/kernel"
    if table not in shapes or query not in shapes:
        raise ValueError(f"cannot read the architecture: the checkpoint has no {table} or {query}")
    layers = {int(m.group(1)) for n in shapes
              if (m := re.match(rf"{re.escape(scope)}/encoder/layer_(\d+)/", n))}
    return dict(
        vocab_size=shapes[table][0], embedding_size=shapes[table][1],
        hidden_size=shapes[query][1], num_hidden_layers=max(layers) + 1,
        intermediate_size=shapes[f"{scope}/encoder/layer_0/intermediate/dense/kernel"][1],
        max_position_embeddings=shapes[f"{emb_scope}/embeddings/position_embeddings"][0],
        type_vocab_size=shapes[f"{emb_scope}/embeddings/token_type_embeddings"][0])


def checkpoint_shapes(prefix: str, directory: str | None = None) -> dict[str, list[int]]:
    """name -> shape of checkpoint `prefix` (of the then-newest one if a save in `directory`
    pruned it meanwhile: checkpoint.read_newest)."""
    _, shapes = checkpoint.read_newest(
        prefix, directory, lambda p: checkpoint.load(p).get_variable_to_shape_map())
    return {n: list(shapes[n]) for n in sorted(shapes)}


def _find_vocab(path: str, kind: str) -> str | None:
    """vocab.txt or spm.model in the model dir (a fine-tuned model: in its pre-trained dir)."""
    directories = [path]
    if kind == "finetuned":
        directories.append(os.path.dirname(os.path.dirname(fs.abspath(path.rstrip("/")))))
    return next((found for d in directories if (found := tokenization.find_vocab_file(d))), None)


def add_heads_flags(parser) -> None:
    """--num-attention-heads and --generator-num-attention-heads on an argparse parser."""
    parser.add_argument(HEADS_FLAG, type=int, metavar="N",
                        help="attention heads of a model dir without bert_config.json or "
                             "pretrain_config.json (an official release: small 4, base 12, large "
                             "16); no checkpoint shape shows them")
    parser.add_argument(GENERATOR_HEADS_FLAG, type=int, metavar="N",
                        help="the same for its generator, without generator_config.json")


def read_model_dir(path: str, checkpoint_path: str | None = None,
                   vocab_file: str | None = None, num_attention_heads: int | None = None,
                   generator_num_attention_heads: int | None = None) -> ModelDir:
    """The architecture, checkpoint and vocabulary of the model in `path`.

    num_attention_heads, generator_num_attention_heads: what the user states for a model dir
    without configs (no checkpoint shape shows them); with configs they must agree.

    Raises:
      ValueError: no checkpoint, or no way to know the architecture.
    """
    fs.check_spellings({"--model-dir": path, "--checkpoint": checkpoint_path,
                        "--vocab-file": vocab_file})
    if not fs.isdir(path):
        raise ValueError(f"model dir {path} does not exist")
    source = checkpoint_path or path
    checkpoint_dir = source if fs.isdir(source) else None
    try:
        prefix = checkpoint.resolve(source)
    except FileNotFoundError as e:
        raise ValueError(f"{e} (pass --checkpoint to pick one)") from None
    notes: list[str] = []
    generator_config = generator_unknown = None
    finetune_file = os.path.join(path, FINETUNE_CONFIG_FILE)
    if fs.isfile(finetune_file):
        kind = "finetuned"
        saved = io_utils.read_json(finetune_file)
        settings = dict(saved.get("training_settings", {}))
        if "bert_config" not in saved:
            raise ValueError(f"{finetune_file}: no 'bert_config' entry")
        bert_config = modeling.BertConfig.from_dict(saved["bert_config"], where=finetune_file)
    else:
        kind = "pretrained"
        settings_file = os.path.join(path, PRETRAIN_CONFIG_FILE)
        settings = io_utils.read_json(settings_file) if fs.isfile(settings_file) else {}
        shapes = _Shapes(prefix, checkpoint_dir)
        bert_config = _discriminator(path, settings, shapes, num_attention_heads, notes)
        generator_config, generator_unknown = _generator(
            path, settings, shapes, bert_config, generator_num_attention_heads, notes)
    _check_stated_heads(bert_config, num_attention_heads, HEADS_FLAG, path)
    do_lower_case = bool(settings.get("do_lower_case", True))
    vocab = vocab_file or _find_vocab(path, kind)
    if vocab_file and not fs.isfile(vocab_file):
        raise ValueError(f"vocabulary file {vocab_file} {fs.not_a_file(vocab_file)}")
    if vocab:
        size = len(tokenization.load_vocab(vocab))
        if size > bert_config.vocab_size:  # its last ids would index past the embedding table
            raise ValueError(f"vocabulary {vocab} has {size} tokens but the model in {path} has "
                             f"vocab_size {bert_config.vocab_size}: not this model's vocabulary")
    return ModelDir(path, kind, bert_config, generator_config, prefix, vocab, do_lower_case,
                    settings, notes, checkpoint_dir, generator_unknown)


class _Shapes:
    """The checkpoint's tensor shapes, read on first use."""

    def __init__(self, prefix: str, directory: str | None):
        self._prefix, self._directory, self._shapes = prefix, directory, None

    def __call__(self) -> dict[str, list[int]]:
        if self._shapes is None:
            self._shapes = checkpoint_shapes(self._prefix, self._directory)
        return self._shapes


def _discriminator(path: str, settings: dict, shapes: _Shapes, heads: int | None,
                   notes: list) -> modeling.BertConfig:
    """bert_config.json; else pretrain_config.json's recipe; else the shapes and the heads the
    user states (no shape shows them)."""
    bert_file = os.path.join(path, BERT_CONFIG_FILE)
    if fs.isfile(bert_file):
        return modeling.BertConfig.from_json_file(bert_file)
    if settings:
        config = _from_settings(path, settings)
        _check_sizes(config, shape_sizes(shapes()), path)
        notes.append(f"no {BERT_CONFIG_FILE}: the architecture rebuilt from "
                     f"{PRETRAIN_CONFIG_FILE}, its sizes checked against the checkpoint")
        return config
    sizes = shape_sizes(shapes())
    if heads is None:
        raise ValueError(
            f"{path} has no {BERT_CONFIG_FILE} (nor {PRETRAIN_CONFIG_FILE}): the checkpoint shows "
            f"{sizes['num_hidden_layers']} layers of hidden size {sizes['hidden_size']} but not "
            f"the number of attention heads, which no shape shows. Pass {HEADS_FLAG} (ELECTRA's "
            f"released discriminators: small 4, base 12, large 16), or put the model's "
            f"{BERT_CONFIG_FILE} in {path}")
    notes.append(f"no {BERT_CONFIG_FILE}: layers and sizes read off the checkpoint, {heads} heads "
                 f"from {HEADS_FLAG}, the activation taken as GELU (every ELECTRA release's)")
    return modeling.BertConfig.from_dict(dict(sizes, num_attention_heads=heads),
                                         where=f"{path} with {HEADS_FLAG}")


def _generator(path: str, settings: dict, shapes: _Shapes, bert_config: modeling.BertConfig,
               heads: int | None, notes: list) -> tuple[modeling.BertConfig | None, str | None]:
    """(the generator's config or None, why a generator the checkpoint holds has none)."""
    gen_file = os.path.join(path, GENERATOR_CONFIG_FILE)
    if fs.isfile(gen_file):
        config = modeling.BertConfig.from_json_file(gen_file)
        _check_stated_heads(config, heads, GENERATOR_HEADS_FLAG, gen_file)
        return config, None
    if not any(n.startswith("generator/encoder/") for n in shapes()):
        if "generator_predictions/output_bias" in shapes():
            return bert_config, None  # the discriminator's encoder doubles as the generator
        return None, None
    emb = "generator" if "generator/embeddings/word_embeddings" in shapes() else "electra"
    sizes = shape_sizes(shapes(), "generator", emb)
    if settings:
        config = _generator_from_settings(path, settings, bert_config)
        _check_sizes(config, sizes, path, "generator ")
        _check_stated_heads(config, heads, GENERATOR_HEADS_FLAG, path)
        return config, None
    if heads is None:
        return None, (f"{path} has no {GENERATOR_CONFIG_FILE} (nor {PRETRAIN_CONFIG_FILE}): the "
                      f"checkpoint's generator has hidden size {sizes['hidden_size']}, but no "
                      f"shape shows its number of attention heads; pass {GENERATOR_HEADS_FLAG}")
    notes.append(f"no {GENERATOR_CONFIG_FILE}: the generator's layers and sizes read off the "
                 f"checkpoint, {heads} heads from {GENERATOR_HEADS_FLAG}")
    return modeling.BertConfig.from_dict(dict(sizes, num_attention_heads=heads),
                                         where=f"{path} with {GENERATOR_HEADS_FLAG}"), None


def _from_settings(path: str, settings: dict) -> modeling.BertConfig:
    """The discriminator run_pretraining.py built from these resolved hparams."""
    where = os.path.join(path, PRETRAIN_CONFIG_FILE)
    try:
        return modeling.get_bert_config(settings["model_size"], settings["vocab_size"],
                                        settings.get("embedding_size"),
                                        settings.get("model_hparam_overrides"),
                                        bool(settings.get("debug", False)))
    except KeyError as e:
        raise ValueError(f"{where}: no {e.args[0]!r}, so the architecture is not known (and "
                         f"there is no {BERT_CONFIG_FILE})") from None


def _generator_from_settings(path: str, settings: dict,
                             bert_config: modeling.BertConfig) -> modeling.BertConfig:
    where = os.path.join(path, PRETRAIN_CONFIG_FILE)
    try:
        return modeling.get_generator_config(bert_config, settings["generator_hidden_size"],
                                             settings["generator_layers"])
    except KeyError as e:
        raise ValueError(f"{where}: no {e.args[0]!r}, so the generator's architecture is not "
                         f"known (and there is no {GENERATOR_CONFIG_FILE})") from None


def _check_sizes(config: modeling.BertConfig, sizes: dict[str, int], path: str,
                 what: str = "") -> None:
    """Refuses a pretrain_config.json that does not describe the checkpoint beside it."""
    for key in SHAPE_KEYS:
        if getattr(config, key) != sizes[key]:
            raise ValueError(
                f"{os.path.join(path, PRETRAIN_CONFIG_FILE)} gives the {what}{key} "
                f"{getattr(config, key)} but the checkpoint's tensors have {sizes[key]}: it is "
                f"not this checkpoint's config; put the model's {BERT_CONFIG_FILE} and "
                f"{GENERATOR_CONFIG_FILE} beside it")


def _check_stated_heads(config: modeling.BertConfig, heads: int | None, flag: str,
                        source: str) -> None:
    if heads is not None and heads != config.num_attention_heads:
        raise ValueError(f"{flag} {heads}, but {source} says {config.num_attention_heads} "
                         "attention heads; leave the flag out to use the model's")
