"""Exports models to Hugging Face files or a TF SavedModel; imports Hugging Face ELECTRA weights.

Export (the model dir is a pre-training dir, a fine-tuning trial dir, or an official release dir):

    # pre-trained discriminator -> ElectraForPreTraining (default for pre-training dirs; an
    # official release dir, without configs, needs its heads stated: --num-attention-heads 4)
    python export_model.py --model-dir DATA/models/small --format huggingface --output hf_disc
    # its generator -> ElectraForMaskedLM
    python export_model.py --model-dir DATA/models/small --format huggingface --model generator \\
        --output hf_gen
    # a fine-tuned GLUE trial -> ElectraForSequenceClassification (default for trial dirs;
    # a chunking trial -> ElectraForTokenClassification)
    python export_model.py --model-dir DATA/models/small/finetuning_models/sst_model_1 \\
        --format huggingface --output hf_sst
    # the same trial -> SavedModel with a serving signature on input_ids, input_mask, segment_ids
    python export_model.py --model-dir DATA/models/small/finetuning_models/sst_model_1 \\
        --format saved_model --output sst_savedmodel

Import (Hugging Face directory with config.json + model.safetensors -> a model dir that
run_finetuning.py can start from, with bert_config.json, vocab.txt and a checkpoint):

    python export_model.py --import-dir electra-small-discriminator --format huggingface \\
        --output DATA/models/hf_small [--import-generator electra-small-generator]
    python run_finetuning.py --data-dir DATA --model-name hf_small \\
        --hparams '{"task_names": ["sst"], ...the architecture hparams the import prints}'

Hugging Face files: config.json (ElectraConfig keys; hidden_act "gelu", the exact GELU of the
official code and of this one), model.safetensors (HF names, linear weights [out, in]), vocab.txt,
tokenizer_config.json and special_tokens_map.json (ElectraTokenizer, WordPiece: a SentencePiece
model is refused, or exported without tokenizer files with --no-tokenizer). How each variable maps, and how the official
one-layer classifier head maps onto ElectraClassificationHead: model/hf_conversion.py.
Outputs are written to a temporary directory next to --output (where it really is, if it is a
symlink) and put in its place, under a lock that refuses a second export to the same place. On
the local disk (a path or a file:// URL) --output is the old export or the new one at every
instant (on Linux the two are exchanged in one step); what a killed export leaves beside it is
put right by the next export there. On gs://, s3://, hdfs:// the old output is deleted and the
files are moved in one by one: a kill then leaves a partial output; re-run with --overwrite and
delete the `.<name>.tmp-*` directory beside it.
"""
import argparse
import contextlib
import json
import logging
import os
import struct
import sys
import tempfile
import uuid

from util import console  # first: keeps TensorFlow's start-up lines off the console

import numpy as np

from model import hf_conversion as hf
from model import model_dir as model_dir_lib
from model import tokenization
from util import checkpoint, file_modes, fs, io_utils, place_locks, write_errors

log = logging.getLogger("export_model")

SAFETENSORS_FILE = "model.safetensors"
SAFETENSORS_INDEX = "model.safetensors.index.json"
HF_CONFIG_FILE = "config.json"


# -- atomic output ----------------------------------------------------------------------------


def check_output_apart(output: str, dirs: dict[str, str | None],
                       files: dict[str, str | None] | None = None) -> None:
    """Refuses an output that is, contains or lies inside a directory the command reads (flag ->
    path in `dirs`), or that contains a file it reads (`files`): replacing the output
    (--overwrite) would delete them, e.g. a model dir with its checkpoints, generator and
    fine-tuned models. Any spelling of either (local path, file:// URL, symlink, `..`: see
    fs.place)."""
    sources = [(flag, path, True) for flag, path in dirs.items()]
    sources += [(flag, path, False) for flag, path in (files or {}).items()]
    for flag, source, whole_dir in sources:
        if not source:
            continue
        relation = fs.relation(output, source)
        if relation is None or (relation == "inside" and not whole_dir):
            continue
        relation = {"same": "is", "contains": "contains", "inside": "lies inside"}[relation]
        raise ValueError(f"--output {output} {relation} {flag} {source}: writing the export "
                         f"there would replace or mix with what {flag} holds. Choose an output "
                         "outside it")


@contextlib.contextmanager
def atomic_output_dir(path: str, overwrite: bool = False):
    """Yields a temporary directory beside `path`, put in place of `path` when the block
    succeeds (io_utils.replace_dir: on the local disk `path` is the old export or the new one
    at every instant; on gs://, s3://, hdfs://, ram:// file by file, best effort).

    `path` is taken where it really is (a symlink's target), and locked there for the whole
    command: a second export to it, under any spelling, is refused. What a command killed
    while replacing it left beside it is put right first (io_utils.recover_dir).
    """
    target = fs.place(path)
    with place_locks.holding([place_locks.Place("--output", path, False)]):
        for line in io_utils.recover_dir(target):
            log.warning("%s", line)
        if fs.exists(target) and not fs.isdir(target):
            raise ValueError(f"output {path} is an existing file, not a directory; an export is "
                             "a directory: choose another --output")
        if fs.exists(target) and not overwrite:
            raise ValueError(f"output {path} already exists; pass --overwrite to replace it")
        parent = os.path.dirname(target)
        fs.makedirs(parent)
        # A full or read-only disk is said of --output, not of the temporary built beside it.
        with write_errors.naming(target, "--output"):
            tmp = _make_temp_dir(parent, io_utils.temp_dir_prefix(target))
            try:
                yield tmp
            except BaseException:
                fs.rmtree(tmp)
                raise
            io_utils.replace_dir(tmp, target)


def _make_temp_dir(parent: str, prefix: str) -> str:
    if not fs.is_url(parent):
        tmp = tempfile.mkdtemp(prefix=prefix, dir=parent)
        file_modes.as_plain_dirs(tmp)  # mkdtemp's 0700 would keep the export from the group
        return tmp
    tmp = os.path.join(parent, prefix + uuid.uuid4().hex[:8])
    fs.makedirs(tmp)
    return tmp


def _check_output_apart_from_model(output: str, md: model_dir_lib.ModelDir) -> None:
    check_output_apart(output, {"--model-dir": md.path},
                       {"--checkpoint": md.checkpoint, "--vocab-file": md.vocab_file})


# -- Hugging Face export ----------------------------------------------------------------------


def _tokenizer_files(directory: str, vocab_file: str, do_lower_case: bool,
                     max_length: int) -> None:
    vocab = tokenization.load_vocab(vocab_file)
    missing = [t for t in ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]") if t not in vocab]
    if missing:
        raise ValueError(f"vocabulary {vocab_file} lacks {missing}; a Hugging Face "
                         "ElectraTokenizer needs the BERT special tokens")
    io_utils.copy_file(vocab_file, os.path.join(directory, "vocab.txt"))
    special = {"unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]",
               "cls_token": "[CLS]", "mask_token": "[MASK]"}
    io_utils.write_json(os.path.join(directory, "tokenizer_config.json"), dict(
        special, tokenizer_class="ElectraTokenizer", do_lower_case=do_lower_case,
        do_basic_tokenize=True, tokenize_chinese_chars=True, strip_accents=None,
        model_max_length=max_length))
    io_utils.write_json(os.path.join(directory, "special_tokens_map.json"), special)


def _load_task(md: model_dir_lib.ModelDir, task: str):
    """The fine-tuned Task object of `task` (its labels, a regression's range), else None."""
    from finetune import serving  # a trial's tasks need the fine-tuning code
    try:
        _, tasks, _ = serving.load_finetuned(md)
    except ValueError as e:
        log.warning("label names and score range unavailable (%s)", e)
        return None
    return next((t for t in tasks if t.name == task), None)


def _task_labels(task_object, task: str, num_outputs: int) -> list[str]:
    """Label names of a fine-tuned task (from its Task class), else LABEL_i."""
    if task_object is not None:
        if hasattr(task_object, "label_list"):
            return list(task_object.label_list)
        if num_outputs == 1:
            return [task]  # regression: one output
    return [f"LABEL_{i}" for i in range(num_outputs)]


def regression_range(task_object) -> dict | None:
    """config.json's "electra_score_range" for a regression head: its output is on the training
    scale, (score - min_value) / scale; this turns it back into the task's units."""
    if task_object is None or not hasattr(task_object, "scale"):
        return None
    return {"min_value": task_object.min_value, "max_value": task_object.max_value,
            "scale": task_object.scale, "score": "logits[..., 0] * scale + min_value"}


def _pick_task(tensors: dict, task: str | None) -> str:
    heads = sorted({n.split("/")[1] for n in tensors if n.startswith("task_specific/")})
    if task is None:
        if len(heads) != 1:
            raise ValueError(f"the checkpoint has task heads {heads or 'none'}; pass --task to "
                             "choose the one to export")
        return heads[0]
    if task not in heads:
        raise ValueError(f"no head for task {task!r}; the checkpoint has {heads or 'none'}")
    return task


def _head_kind(task: str, settings: dict) -> str:
    """"classifier" (one dense on [CLS]) or "tagger" (one dense per token) for a task's head."""
    from finetune import task_builder
    from finetune.classification import classification_tasks
    from finetune.tagging import tagging_tasks

    family = (settings.get("custom_tasks") or {}).get(task, {}).get("type")
    if family is not None:  # a custom task: its family's class
        cls = task_builder.load_class(task_builder.CUSTOM[family])
    else:
        cls = task_builder.task_class(task)
    if issubclass(cls, classification_tasks.SingleOutputTask):
        return "classifier"
    if issubclass(cls, tagging_tasks.TaggingTask):
        return "tagger"
    raise ValueError(f"task {task!r} ({cls.__name__}) has no Hugging Face head equivalent here "
                     "(GLUE classification/regression -> ElectraForSequenceClassification, "
                     "tagging -> ElectraForTokenClassification); use --format saved_model")


def check_tokenizer_exportable(vocab_file: str | None) -> None:
    """Refuses a SentencePiece vocabulary: ElectraTokenizer reads a WordPiece vocab.txt only (a
    copied .model "loads" and tokenizes garbage), and a tokenizer.json equivalent to our
    SentencePiece tokenization cannot be verified without the tokenizers library."""
    if vocab_file and tokenization.is_sentencepiece_model(vocab_file):
        raise ValueError(
            f"the model's vocabulary {vocab_file} is a SentencePiece model, but the Hugging Face "
            "ELECTRA tokenizer (ElectraTokenizer) reads only a WordPiece vocab.txt, and no "
            "SentencePiece tokenizer export that matches this project's tokenization can be "
            "written and checked here. Pass --no-tokenizer to export the weights and "
            "config.json alone (then tokenize with the spm.model yourself)")


def export_huggingface(md: model_dir_lib.ModelDir, output: str, kind: str | None = None,
                       task: str | None = None, overwrite: bool = False,
                       tokenizer: bool = True) -> dict[str, tuple]:
    """Writes `md` as a Hugging Face ELECTRA directory; returns {HF name: shape}.
    tokenizer: also write the tokenizer files (WordPiece vocabularies only)."""
    from safetensors import numpy as st_numpy

    _check_output_apart_from_model(output, md)
    if tokenizer:
        check_tokenizer_exportable(md.vocab_file)
    kind = kind or ("classifier" if md.kind == "finetuned" else "discriminator")
    tensors = md.read_checkpoint(checkpoint.read_all)
    metadata = {"format": "pt"}  # transformers refuses safetensors files without it
    labels = score_range = None
    config = md.bert_config
    if kind == "discriminator":
        if "discriminator_predictions/dense_1/kernel" not in tensors:
            raise ValueError(f"{md.checkpoint} has no discriminator head (an MLM-only or "
                             "fine-tuned model?); try --model generator or classifier")
        weights = hf.discriminator_to_hf(tensors, config)
    elif kind == "generator":
        config = md.generator_config
        if md.generator_unknown:  # a generator whose heads no file states
            raise ValueError(md.generator_unknown)
        if config is None:
            raise ValueError(f"{md.path} has no generator ({model_dir_lib.GENERATOR_CONFIG_FILE} "
                             "missing and no generator/ variables)")
        weights = hf.generator_to_hf(tensors, config)
    elif kind == "classifier":
        task = _pick_task(tensors, task)
        kind = _head_kind(task, md.settings)
        convert = hf.tagger_to_hf if kind == "tagger" else hf.classifier_to_hf
        weights, head_metadata = convert(tensors, config, task)
        metadata.update(head_metadata)
        task_object = _load_task(md, task)
        labels = _task_labels(task_object, task,
                              int(tensors[f"task_specific/{task}/dense/kernel"].shape[1]))
        score_range = regression_range(task_object)
    else:
        raise ValueError(f"unknown --model {kind!r}; expected discriminator, generator or "
                         "classifier")
    expected = hf.expected_hf_shapes(config, kind, len(labels or []))
    got = {n: tuple(v.shape) for n, v in weights.items()}
    if got != expected:  # a mapping bug, never user error: refuse to write a broken export
        diff = sorted(set(got.items()) ^ set(expected.items()))[:5]
        raise RuntimeError(f"exported parameters differ from the ElectraConfig layout: {diff}")
    if md.vocab_file is None and tokenizer:
        raise ValueError(f"no vocab.txt in {md.path}; pass --vocab-file")
    pad_id = tokenization.load_vocab(md.vocab_file).get("[PAD]", 0) if md.vocab_file else 0
    values = hf.hf_config(config, kind, pad_token_id=pad_id, labels=labels, task_name=task)
    if score_range is not None:
        values["electra_score_range"] = score_range
        log.info("regression head: its output is (score - %g) / %g; config.json "
                 "\"electra_score_range\" holds min_value, max_value and scale to read it as a "
                 "score (logits[..., 0] * scale + min_value)", score_range["min_value"],
                 score_range["scale"])
    with atomic_output_dir(output, overwrite) as tmp:
        data = st_numpy.save({n: np.ascontiguousarray(v, np.float32)
                              for n, v in weights.items()}, metadata=metadata)
        with io_utils.atomic_open(os.path.join(tmp, SAFETENSORS_FILE), "wb") as f:
            f.write(data)
        io_utils.write_json(os.path.join(tmp, HF_CONFIG_FILE), values)
        if tokenizer:
            _tokenizer_files(tmp, md.vocab_file, md.do_lower_case,
                             config.max_position_embeddings)
    log.info("wrote %s (%s, %d parameters tensors, %d values) from %s", output,
             hf.ARCHITECTURES[kind], len(weights), sum(v.size for v in weights.values()),
             md.checkpoint)
    return got


# -- SavedModel export ------------------------------------------------------------------------


def export_saved_model(md: model_dir_lib.ModelDir, output: str, overwrite: bool = False) -> None:
    """A fine-tuning trial as a SavedModel; signature documented in finetune/serving.py."""
    import tensorflow as tf

    from finetune import serving

    _check_output_apart_from_model(output, md)
    # The padded layout: static shapes for every consumer of a SavedModel (TPU, converters).
    config, tasks, model = serving.load_finetuned(md, remove_padding=False)
    module = serving.ServingModule(model, tasks, config.max_seq_length)
    with atomic_output_dir(output, overwrite) as tmp:
        tf.saved_model.save(module, tmp, signatures={"serving_default": module.serve})
        if not fs.is_url(tmp):  # TensorFlow makes variables/, assets/ 0755 whatever the umask
            file_modes.as_plain_dirs(tmp)
    log.info("wrote SavedModel %s (tasks %s; signature serving_default(input_ids, input_mask, "
             "segment_ids: int32 [batch, seq_len]))", output, ",".join(t.name for t in tasks))


# -- Hugging Face import ----------------------------------------------------------------------


def read_safetensors(directory: str) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """All tensors (numpy) and the metadata of model.safetensors (or its shards)."""
    from safetensors import SafetensorError
    from safetensors import numpy as st_numpy

    index = os.path.join(directory, SAFETENSORS_INDEX)
    if fs.isfile(index):
        files = sorted(set(io_utils.read_json(index).get("weight_map", {}).values()))
    elif fs.isfile(os.path.join(directory, SAFETENSORS_FILE)):
        files = [SAFETENSORS_FILE]
    else:
        present = sorted(fs.listdir(directory))
        hint = (" (pytorch_model.bin is a pickle, which this project never loads; re-save "
                "with save_pretrained(..., safe_serialization=True))"
                if "pytorch_model.bin" in present else "")
        raise ValueError(f"{directory} has no {SAFETENSORS_FILE}{hint}; it holds: "
                         f"{', '.join(present) or 'nothing'}")
    tensors: dict[str, np.ndarray] = {}
    metadata: dict[str, str] = {}
    for name in files:
        path = os.path.join(directory, name)
        try:
            data = fs.read_bytes(path)  # from bytes: safetensors opens local files only
            tensors.update(st_numpy.load(data))
            metadata.update(_safetensors_metadata(data))
        except SafetensorError as e:  # a truncated or partial download, another format
            raise ValueError(f"{path} is damaged or not a safetensors file ({e}); download or "
                             "save it again") from None
        except (TypeError, ValueError) as e:  # e.g. bfloat16, which numpy cannot hold
            raise ValueError(f"{path}: cannot read as numpy ({e}); save the model in float32 "
                             "or float16") from None
    return tensors, metadata


def _safetensors_metadata(data: bytes) -> dict[str, str]:
    """The "__metadata__" of a safetensors file (after load() has checked its header):
    a little-endian u64 header size, then the header as JSON."""
    size = struct.unpack("<Q", data[:8])[0]
    return json.loads(data[8:8 + size]).get("__metadata__") or {}


def _read_hf_dir(directory: str):
    config_file = os.path.join(directory, HF_CONFIG_FILE)
    if not fs.isfile(config_file):
        raise ValueError(f"{directory} has no {HF_CONFIG_FILE}")
    values = io_utils.read_json(config_file)
    architectures = values.get("architectures") or []
    kinds = [hf.KIND_OF_ARCHITECTURE[a] for a in architectures if a in hf.KIND_OF_ARCHITECTURE]
    config, notes = hf.bert_config_from_hf(values, where=config_file)
    tensors, metadata = read_safetensors(directory)
    if not kinds:
        if not any(a.startswith("Electra") for a in architectures):
            raise ValueError(f"{config_file}: architectures {architectures} name no ELECTRA model")
        # ElectraModel, ElectraForTokenClassification, ...: the encoder is what fine-tuning needs.
        notes.append(f"{architectures[0]}: imported the encoder only (heads here are "
                     f"{', '.join(sorted(hf.KIND_OF_ARCHITECTURE))})")
        kinds = ["encoder"]
    return kinds[0], config, values, hf.with_model_prefix(tensors), metadata, notes


def _same_embeddings(a: dict, b: dict) -> bool:
    names = [n for n in a if n.startswith("electra/embeddings/")]
    return all(n in b and a[n].shape == b[n].shape and np.array_equal(a[n], b[n]) for n in names)


def import_huggingface(hf_dir: str, output: str, generator_dir: str | None = None,
                       task: str | None = None, overwrite: bool = False) -> dict[str, np.ndarray]:
    """Writes an HF ELECTRA model (and optionally its generator) as one of our model dirs."""
    check_output_apart(output, {"--import-dir": hf_dir, "--import-generator": generator_dir})
    kind, config, values, hf_tensors, metadata, notes = _read_hf_dir(hf_dir)
    gen_config = None
    if kind == "generator":
        if generator_dir:
            raise ValueError("--import-dir is itself a generator (ElectraForMaskedLM); give the "
                             "discriminator there and the generator with --import-generator")
        # A generator alone keeps its own embeddings (generator/embeddings).
        imported = hf.from_hf(hf_tensors, config, "generator", scope="generator",
                              where=os.path.join(hf_dir, HF_CONFIG_FILE))
        tensors, unused = dict(imported.tensors), list(imported.unused)
        gen_config, config = config, None
        notes += imported.notes
    else:
        imported = hf.from_hf(hf_tensors, config, kind, metadata=metadata,
                              where=os.path.join(hf_dir, HF_CONFIG_FILE),
                              task_name=task or values.get("finetuning_task"))
        tensors, unused = dict(imported.tensors), list(imported.unused)
        notes += imported.notes
    if generator_dir:
        gen_kind, gen_config, _, gen_hf, _, gen_notes = _read_hf_dir(generator_dir)
        if gen_kind != "generator":
            raise ValueError(f"{generator_dir} is not an ElectraForMaskedLM (architectures say "
                             f"{gen_kind})")
        gen = hf.from_hf(gen_hf, gen_config, "generator", scope="generator",
                         where=os.path.join(generator_dir, HF_CONFIG_FILE))
        gen_tensors = {n.replace("generator/embeddings/", "electra/embeddings/"): v
                       for n, v in gen.tensors.items()}
        if _same_embeddings(gen_tensors, tensors):
            # Tied, as in the official model: one table under electra/embeddings.
            gen_tensors = {n: v for n, v in gen_tensors.items()
                           if not n.startswith("electra/embeddings/")}
            notes.append("generator and discriminator embeddings are identical: imported tied")
        else:
            gen_tensors = gen.tensors
            notes.append("generator embeddings differ from the discriminator's: imported untied "
                         "(generator/embeddings)")
        tensors.update(gen_tensors)
        unused += [f"generator: {n}" for n in gen.unused]
        notes += gen_notes + gen.notes
    vocab = os.path.join(hf_dir, "vocab.txt")
    with atomic_output_dir(output, overwrite) as tmp:
        if config is not None:
            io_utils.write_text(os.path.join(tmp, model_dir_lib.BERT_CONFIG_FILE),
                                config.to_json_string() + "\n")
        if gen_config is not None:
            io_utils.write_text(os.path.join(tmp, model_dir_lib.GENERATOR_CONFIG_FILE),
                                gen_config.to_json_string() + "\n")
        if fs.isfile(vocab):
            io_utils.copy_file(vocab, os.path.join(tmp, model_dir_lib.VOCAB_FILE))
        else:
            notes.append(f"no vocab.txt in {hf_dir}: copy the WordPiece vocabulary into the "
                         "model dir before fine-tuning")
        checkpoint.CheckpointManager(tmp).save(tensors, 0)
    for note in notes:
        log.info("note: %s", note)
    if unused:
        log.info("ignored %d Hugging Face tensors: %s", len(unused), ", ".join(unused[:10]))
    log.info("wrote %s: %d variables from %s", output, len(tensors), hf_dir)
    if config is not None:
        log.info("fine-tune it with these hparams (plus task_names, ...): %s",
                 json.dumps(finetune_hparams(config), sort_keys=True))
    return tensors


def finetune_hparams(config) -> dict:
    """The run_finetuning.py hparams that rebuild `config` (fine-tuning takes the architecture
    from hparams, as the official code, not from the model dir's bert_config.json)."""
    overrides = {k: v for k, v in config.to_dict().items() if k not in ("vocab_size",
                                                                        "embedding_size")}
    return {"vocab_size": config.vocab_size, "embedding_size": config.embedding_size,
            "model_hparam_overrides": overrides}


# -- command line -----------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n")[0], epilog=__doc__.split("\n", 2)[2],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--model-dir", help="model to export: a pre-training dir, a fine-tuning "
                                            "trial dir or an official release dir")
    source.add_argument("--import-dir", help="Hugging Face ELECTRA directory to import "
                                             "(config.json + model.safetensors)")
    parser.add_argument("--format", required=True, choices=["huggingface", "saved_model"],
                        help="huggingface (export or import) or saved_model (export only)")
    parser.add_argument("--output", required=True, help="directory to write (must not exist "
                                                        "unless --overwrite)")
    parser.add_argument("--model", choices=["discriminator", "generator", "classifier"],
                        help="what to export to Hugging Face: discriminator, generator, or "
                             "classifier = a trial's task head, as sequence or token "
                             "classification by task (default: classifier for trial dirs, else "
                             "discriminator)")
    parser.add_argument("--task", help="task head to export or import (default: the only one)")
    parser.add_argument("--checkpoint", help="checkpoint prefix (default: newest in --model-dir)")
    parser.add_argument("--vocab-file", help="vocabulary (default: the model dir's vocab.txt)")
    model_dir_lib.add_heads_flags(parser)
    parser.add_argument("--import-generator", help="with --import-dir: the matching "
                                                   "ElectraForMaskedLM directory")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace an existing --output (atomically on the local disk; "
                             "file by file on gs://, s3://, hdfs://: see above)")
    parser.add_argument("--no-tokenizer", action="store_true",
                        help="Hugging Face export: weights and config.json only, no tokenizer "
                             "files (needed for SentencePiece models, which ElectraTokenizer "
                             "cannot read)")
    console.add_verbose_flag(parser)
    args = parser.parse_args(argv)
    console.setup(args.verbose)
    try:
        fs.check_spellings({"--model-dir": args.model_dir, "--import-dir": args.import_dir,
                            "--output": args.output, "--checkpoint": args.checkpoint,
                            "--vocab-file": args.vocab_file,
                            "--import-generator": args.import_generator})
        # Before any model is read: an --output whose directory cannot be written.
        write_errors.check_writable("--output", args.output)
        if args.import_dir:
            if args.format != "huggingface":
                raise ValueError("--import-dir reads Hugging Face directories: use --format "
                                 "huggingface")
            import_huggingface(args.import_dir, args.output, args.import_generator, args.task,
                               args.overwrite)
            return 0
        md = model_dir_lib.read_model_dir(args.model_dir, args.checkpoint, args.vocab_file,
                                          args.num_attention_heads,
                                          args.generator_num_attention_heads)
        for note in md.notes:
            log.info("note: %s", note)
        if args.format == "huggingface":
            export_huggingface(md, args.output, args.model, args.task, args.overwrite,
                               tokenizer=not args.no_tokenizer)
        else:
            if args.model not in (None, "classifier"):
                raise ValueError("--format saved_model exports fine-tuned models only")
            export_saved_model(md, args.output, args.overwrite)
    except (ValueError, OSError, place_locks.RunLockError) as e:  # OSError: disk full, read-only
        log.error("%s", e)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
