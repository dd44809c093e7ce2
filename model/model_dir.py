"""Reading a model directory: architecture, checkpoint and vocabulary, whoever wrote it.

Three layouts are understood:

- pre-training (run_pretraining.py, or export_model.py's Hugging Face import): bert_config.json,
  generator_config.json (if there is a generator), pretrain_config.json, vocab.txt, checkpoints;
- a fine-tuning trial (run_finetuning.py, `<model_dir>_<trial>`): finetune_config.json (its
  "bert_config" and "training_settings"), checkpoints; the vocabulary sits two levels up, in the
  pre-trained model dir (`<pretrained>/finetuning_models/<tasks>_model_<trial>`);
- an official release directory (checkpoint + vocab.txt, no config): the architecture is read
  off the tensor shapes, with one attention head per 64 hidden units as every released size uses.
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
    notes: list  # what was inferred rather than read
    # The directory `checkpoint` was chosen from as its newest (None: the user named it).
    checkpoint_dir: str | None = None

    def read_checkpoint(self, read: Callable[[str], T]) -> T:
        """read(prefix) of the model's checkpoint. If a run training in `checkpoint_dir` pruned
        it meanwhile (keep_checkpoint_max), the then-newest one is read, and `checkpoint`
        names it from then on."""
        self.checkpoint, result = checkpoint.read_newest(self.checkpoint, self.checkpoint_dir,
                                                         read)
        return result


def infer_config(shapes: dict[str, list[int]], scope: str = "electra",
                 emb_scope: str | None = None) -> modeling.BertConfig:
    """A BertConfig from checkpoint tensor shapes (name -> shape) of the encoder under `scope`.

    Raises:
      ValueError: the tensors do not hold such an encoder.
    """
    emb_scope = emb_scope or scope
    table = f"{emb_scope}/embeddings/word_embeddings"
    query = f"{scope}/encoder/layer_0/attention/self/query/kernel"
    if table not in shapes or query not in shapes:
        raise ValueError(f"cannot infer the architecture: the checkpoint has no {table} or {query}")
    layers = {int(m.group(1)) for n in shapes
              if (m := re.match(rf"{re.escape(scope)}/encoder/layer_(\d+)/", n))}
    hidden = shapes[query][1]
    return modeling.BertConfig(
        vocab_size=shapes[table][0], embedding_size=shapes[table][1], hidden_size=hidden,
        num_hidden_layers=max(layers) + 1,
        num_attention_heads=max(1, hidden // 64),
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


def read_model_dir(path: str, checkpoint_path: str | None = None,
                   vocab_file: str | None = None) -> ModelDir:
    """The architecture, checkpoint and vocabulary of the model in `path`.

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
    generator_config = None
    finetune_file = os.path.join(path, FINETUNE_CONFIG_FILE)
    bert_file = os.path.join(path, BERT_CONFIG_FILE)
    if fs.isfile(finetune_file):
        kind = "finetuned"
        saved = io_utils.read_json(finetune_file)
        settings = dict(saved.get("training_settings", {}))
        if "bert_config" not in saved:
            raise ValueError(f"{finetune_file}: no 'bert_config' entry")
        bert_config = modeling.BertConfig.from_dict(saved["bert_config"], where=finetune_file)
        do_lower_case = bool(settings.get("do_lower_case", True))
    else:
        kind = "pretrained"
        settings_file = os.path.join(path, PRETRAIN_CONFIG_FILE)
        settings = io_utils.read_json(settings_file) if fs.isfile(settings_file) else {}
        do_lower_case = bool(settings.get("do_lower_case", True))
        shapes = None
        if fs.isfile(bert_file):
            bert_config = modeling.BertConfig.from_json_file(bert_file)
        else:
            shapes = checkpoint_shapes(prefix, checkpoint_dir)
            bert_config = infer_config(shapes)
            notes.append(f"no {BERT_CONFIG_FILE}: architecture read off the checkpoint shapes "
                         f"({bert_config.num_hidden_layers} layers, hidden "
                         f"{bert_config.hidden_size}, {bert_config.num_attention_heads} heads)")
        gen_file = os.path.join(path, GENERATOR_CONFIG_FILE)
        if fs.isfile(gen_file):
            generator_config = modeling.BertConfig.from_json_file(gen_file)
        else:
            shapes = shapes or checkpoint_shapes(prefix, checkpoint_dir)
            if any(n.startswith("generator/encoder/") for n in shapes):
                emb = ("generator" if "generator/embeddings/word_embeddings" in shapes
                       else "electra")
                generator_config = infer_config(shapes, "generator", emb)
                notes.append(f"no {GENERATOR_CONFIG_FILE}: generator architecture read off the "
                             "checkpoint shapes")
            elif "generator_predictions/output_bias" in shapes:
                generator_config = bert_config  # the discriminator encoder doubles as generator
    vocab = vocab_file or _find_vocab(path, kind)
    if vocab_file and not fs.isfile(vocab_file):
        raise ValueError(f"vocabulary file {vocab_file} does not exist")
    if vocab:
        size = len(tokenization.load_vocab(vocab))
        if size > bert_config.vocab_size:  # its last ids would index past the embedding table
            raise ValueError(f"vocabulary {vocab} has {size} tokens but the model in {path} has "
                             f"vocab_size {bert_config.vocab_size}: not this model's vocabulary")
    return ModelDir(path, kind, bert_config, generator_config, prefix, vocab, do_lower_case,
                    settings, notes, checkpoint_dir)
