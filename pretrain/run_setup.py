"""Before the first step of a pre-training run: its inputs checked, its model dir resumed or
initialised.

- `check_run`: all that can be checked before the model is built; `load_special_ids` and
  `check_data_matches`: the vocabulary and the tfrecords agree with the hparams (a mismatch would
  fail deep inside tf.data, or index past the embedding table);
- `restore_or_init`: resumes from the model dir's newest readable checkpoint, refusing another
  model (ARCHITECTURE_KEYS, util/resume.py), another vocabulary or changed training tfrecords
  (`continue_data`, unless resume_on_changed_data); else applies init_checkpoint, refusing a
  fine-tuned one;
- `prepare_model_dir`: the files beside the checkpoints (resolved config, architecture configs,
  a copy of the vocabulary, the identity of the training tfrecords: pretrain/data_record.py).
"""
import json
import logging
import os
from typing import NamedTuple

import tensorflow as tf

from configure_pretraining import PretrainingConfig
from model import model_dir as model_dir_lib
from model import pretrained_vocab, tokenization
from pretrain import data_record, evaluation, input_pipeline, pretrain_data
from pretrain.masking import SpecialIds
from pretrain.trainer import Trainer
from util import checkpoint, fs, io_utils, record_check, resume, tf_data, write_errors
from util import training_utils as tu
from util.hparams import HParamError
from util.place_locks import Place

log = logging.getLogger(__name__)

# Hparams whose change makes existing checkpoints a different model: resuming is refused.
ARCHITECTURE_KEYS = ("model_size", "model_hparam_overrides", "embedding_size", "vocab_size",
                     "debug", "electra_objective", "uniform_generator", "untied_generator",
                     "untied_generator_embeddings", "embedding_sharing", "generator_hidden_size",
                     "generator_layers", "two_tower_generator",
                     # the objectives of configure_pretraining (pretrain/objectives/)
                     "replace_mlm", "all_tokens_mlm", "unigram_generator",
                     "adversarial_generator", "freeze_generator", "electric_objective")


class IncompatibleResumeError(ValueError):
    """The model dir holds checkpoints of a model the current hparams do not describe."""


# -- inputs ------------------------------------------------------------------------------------


def check_run(config: PretrainingConfig, chief: bool
              ) -> tuple[SpecialIds, input_pipeline.DataFiles]:
    """All that can be checked before the model is built: the vocabulary, the tfrecords (and
    the held-out data when evaluating), the output paths. Returns the special token ids and the
    data files."""
    special_ids = load_special_ids(config)
    files = input_pipeline.find_files(config.pretrain_tfrecords, config.eval_tfrecords)
    evaluating = config.do_eval or (config.do_train and config.eval_every_steps > 0)
    check_data_matches(config, files, evaluating)
    if evaluating:
        evaluation.check_eval_data(config, files)
    checkpoint.check_path(config.model_dir, "model dir")
    config.check_output_paths(["results_txt", "results_json"], [])
    config.check_outputs_apart(["results_txt", "results_json"], [
        ("hparam 'vocab_file'", config.vocab_file)] + [
        ("training file", f) for f in files.train] + [("held-out file", f) for f in files.eval])
    if chief and config.do_train:
        ok, reason = tu.is_writable_dir(config.model_dir)
        if not ok:
            raise ValueError(f"cannot write to model dir {config.model_dir}: {reason}")
    if chief:  # results and the eval history too, wherever hparams put them: now, not at an eval
        for place in output_places(config)[1:]:
            write_errors.check_writable(place.what, place.path, place.written_into)
    return special_ids, files


def output_places(config: PretrainingConfig) -> list[Place]:
    """Every place a pre-training run writes, for its locks: the model dir, and the results
    files and eval history wherever hparams put them (outside the model dir, they need their
    own locks)."""
    history = os.path.join(os.path.dirname(config.results_json), evaluation.HISTORY_FILE)
    return [Place("model dir", config.model_dir, True),
            Place("hparam 'results_json'", config.results_json, False),
            Place("hparam 'results_txt'", config.results_txt, False),
            Place("eval history", history, False)]


def _refuse_missing_vocab(config: PretrainingConfig) -> None:
    """A missing vocab file, named with the vocabulary the data's metadata.json was built with
    (a SentencePiece build keeps no vocab.txt: the default vocab_file cannot be found)."""
    metadata_path = os.path.join(os.path.dirname(config.pretrain_tfrecords),
                                 pretrain_data.METADATA_FILE)
    built = None
    if fs.isfile(metadata_path):
        try:
            metadata = io_utils.read_json(metadata_path)
        except ValueError:
            metadata = {}
        built = metadata.get("spm_model") or metadata.get("vocab_file")
    if isinstance(built, str):
        raise HParamError(f"vocab file {config.vocab_file} does not exist; the tfrecords were "
                          f"built with {built} ({metadata_path}): set \"vocab_file\": "
                          f"\"{built}\"")
    raise HParamError(f"vocab file {config.vocab_file} does not exist; set hparam vocab_file")


def load_special_ids(config: PretrainingConfig) -> SpecialIds:
    """Special token ids from the vocab file; its size must equal hparam vocab_size."""
    if not fs.exists(config.vocab_file):
        _refuse_missing_vocab(config)
    vocab = tokenization.load_vocab(config.vocab_file)
    if len(vocab) != config.vocab_size:
        raise HParamError(
            f"vocab file {config.vocab_file} has {len(vocab)} tokens but hparam vocab_size is "
            f"{config.vocab_size}; set \"vocab_size\": {len(vocab)} in --hparams")
    pretrained_vocab.check_size(config.vocab_file, len(vocab), config.init_checkpoint)
    return SpecialIds.from_vocab(vocab, where=f"vocab file {config.vocab_file}")


class _DataGroup(NamedTuple):
    """Shards checked together, and how messages name them and say what to do."""
    paths: list[str]
    noun: str  # "tfrecords", "held-out tfrecords"
    where: str  # "" or " (hparam eval_tfrecords)": where the user chose them
    fix: str  # formatted with key, built, wanted


def check_data_matches(config: PretrainingConfig, files: input_pipeline.DataFiles,
                       evaluating: bool = False) -> None:
    """Refuses tfrecords built for another max_seq_length or vocabulary (they would fail deep
    inside tf.data, or index past the embedding table), naming the file that says so: the
    training shards, and the held-out ones when `evaluating` (one check for both)."""
    groups = [_DataGroup(files.train, "tfrecords", "",
                         "set \"{key}\": {built} or rebuild the data")]
    if evaluating and files.eval:
        where = "hparam eval_tfrecords" if config.eval_tfrecords else "metadata.json eval_files"
        groups.append(_DataGroup(
            files.eval, "held-out tfrecords", f" ({where})",
            "rebuild the held-out data with {key} {wanted}, or point eval_tfrecords at held-out "
            "data built like the training data"))
    for group in groups:
        for directory in sorted({os.path.dirname(p) for p in group.paths}):
            _check_metadata(config, files, directory, group)
        _check_first_example(config, group)


def _check_metadata(config: PretrainingConfig, files: input_pipeline.DataFiles, directory: str,
                    group: _DataGroup) -> None:
    """The build settings metadata.json records in `directory` against the hparams, and the
    sizes of the shards it lists."""
    metadata_path = os.path.join(directory, pretrain_data.METADATA_FILE)
    if not fs.isfile(metadata_path):
        return
    metadata = io_utils.read_json(metadata_path)
    named = f"{group.noun} in {directory}{group.where}"
    built_sha = metadata.get("vocab_sha256")
    # Same size is not enough: another vocabulary gives the ids other meanings.
    if isinstance(built_sha, str) and built_sha != io_utils.sha256_file(config.vocab_file):
        raise HParamError(
            f"vocabulary {config.vocab_file} is not the one the {named} were built with "
            f"({metadata.get('vocab_file', '?')}, sha256 {built_sha[:12]}... in "
            f"{metadata_path}); set \"vocab_file\" to that vocabulary, or rebuild the data "
            "with this one")
    built_case = metadata.get("do_lower_case")
    if isinstance(built_case, bool) and built_case != config.do_lower_case:
        # The text's case decides the tokens; the model's recorded setting is what its evals,
        # probes and every later fine-tuning read text with.
        raise HParamError(
            f"the {named} were built with do_lower_case {json.dumps(built_case)} "
            f"({metadata_path}) but hparam do_lower_case is {json.dumps(config.do_lower_case)}; "
            f"set \"do_lower_case\": {json.dumps(built_case)}, or rebuild the data")
    for key in ("max_seq_length", "vocab_size"):
        built, wanted = metadata.get(key), getattr(config, key)
        if isinstance(built, int) and built != wanted:
            raise HParamError(
                f"the {named} were built with {key} {built} ({metadata_path}) but hparam {key} "
                f"is {wanted}; " + group.fix.format(key=key, built=built, wanted=wanted))
    sizes = metadata.get("shard_bytes")
    for path in (files.train + files.eval) if isinstance(sizes, dict) else ():
        expected = sizes.get(os.path.basename(path)) if os.path.dirname(path) == directory \
            else None
        if isinstance(expected, int) and fs.getsize(path) != expected:
            raise record_check.DamagedRecordFileError(
                f"pre-training tfrecord file {path} has {fs.getsize(path)} bytes but "
                f"the build wrote {expected} ({metadata_path}): a truncated or partial copy; "
                "copy it again or rebuild the data")


def _check_first_example(config: PretrainingConfig, group: _DataGroup) -> None:
    """The length and the token ids of the group's first example (shards without a
    metadata.json say them nowhere else)."""
    first = next((f for f in group.paths if fs.getsize(f) > 0), None)
    file_noun = group.noun[:-1]  # "held-out tfrecord"
    try:
        records = list(tf_data.records(first).take(1)) if first else []
    except tf.errors.DataLossError as e:
        raise record_check.damaged_file_error([first], e, file_noun + " file") from None
    for record in records:
        example = tf.train.Example.FromString(record.numpy())
        ids = example.features.feature["input_ids"].int64_list.value
        if len(ids) != config.max_seq_length:
            raise HParamError(
                f"{file_noun} {first}{group.where} holds examples of {len(ids)} tokens but "
                f"hparam max_seq_length is {config.max_seq_length}; " + group.fix.format(
                    key="max_seq_length", built=len(ids), wanted=config.max_seq_length))
        # Another vocabulary shows when an id falls outside this one (the embedding lookup
        # would fail mid-run); a smaller one only through metadata.json's vocab_sha256.
        if max(ids, default=0) >= config.vocab_size:
            raise HParamError(
                f"{file_noun} {first}{group.where} holds token id {max(ids)}, outside hparam "
                f"vocab_size {config.vocab_size}: it was built with another vocabulary; "
                + ("give the vocabulary it was built with (vocab_file, vocab_size), or rebuild "
                   "the data" if not group.where else group.fix.format(
                       key="vocabulary", wanted=config.vocab_file)))


# -- the model dir -----------------------------------------------------------------------------


def check_resume_compatible(config: PretrainingConfig, saved_path: str) -> list[str]:
    """Refuses architecture changes against the config saved in the model dir; returns the
    other hparams that changed (allowed, logged)."""
    refused, allowed = resume.split_changes(
        io_utils.read_json(saved_path), config.to_dict(), lambda key: key in ARCHITECTURE_KEYS,
        ignore=frozenset({"model_name", "data_dir", "model_dir", "do_train", "do_eval"}))
    if refused:
        raise IncompatibleResumeError(
            f"model dir {config.model_dir} holds checkpoints of another model ("
            f"{'; '.join(refused)}, compared with {saved_path}). Use a new model_name, or pass "
            "the new model as init_checkpoint from a fresh model dir")
    return allowed


def check_resume_vocab(config: PretrainingConfig) -> None:
    """Refuses resuming with a vocabulary other than the model dir's copy (the one its
    checkpoints were trained with), even of the same size: it would be overwritten and the
    checkpoints left beside a vocabulary they never saw."""
    saved = tokenization.find_vocab_file(config.model_dir)
    if saved is None or fs.same_place(saved, config.vocab_file):
        return
    if os.path.basename(saved) != os.path.basename(_vocab_copy_path(config)) or \
            not fs.same_content(saved, config.vocab_file):
        raise IncompatibleResumeError(
            f"model dir {config.model_dir} holds checkpoints trained with vocabulary {saved}, "
            f"but vocab_file is {config.vocab_file}, a different one. Resume with "
            f"\"vocab_file\": \"{saved}\", or use a new model_name for the new vocabulary")


def _vocab_copy_path(config: PretrainingConfig) -> str:
    """Where the model dir keeps its copy of the run's vocabulary."""
    return os.path.join(config.model_dir, "spm.model" if tokenization.is_sentencepiece_model(
        config.vocab_file) else "vocab.txt")


def prepare_model_dir(config: PretrainingConfig, trainer: Trainer) -> None:
    """Writes the resolved config, the architecture configs and a copy of the vocab (chief)."""
    d = config.model_dir
    io_utils.write_json(os.path.join(d, model_dir_lib.PRETRAIN_CONFIG_FILE), config.to_dict())
    io_utils.write_text(os.path.join(d, model_dir_lib.BERT_CONFIG_FILE),
                        trainer.model.disc_config.to_json_string() + "\n")
    if trainer.model.generator_config is not None:
        io_utils.write_text(os.path.join(d, model_dir_lib.GENERATOR_CONFIG_FILE),
                            trainer.model.generator_config.to_json_string() + "\n")
    if trainer.data_record is not None:
        io_utils.write_json(data_record.path(d), trainer.data_record)
    vocab_copy = _vocab_copy_path(config)
    if not fs.same_place(vocab_copy, config.vocab_file) and not (
            fs.exists(vocab_copy) and fs.same_content(vocab_copy, config.vocab_file)):
        io_utils.copy_file(config.vocab_file, vocab_copy)


def continue_data(config: PretrainingConfig, trainer: Trainer, train_files: list[str]) -> str:
    """The data order a resumed run continues on: its own while its training tfrecords are the
    ones data_record.RECORD_FILE names (exact resume); on changed ones a refusal, or with
    resume_on_changed_data a new order from the new files' start. Returns a note for the log."""
    step = trainer.global_step
    record, changed = data_record.check(config.model_dir, train_files, config.seed, step,
                                        config.resume_on_changed_data)
    trainer.data_record = record
    trainer.data_seed = record["data_seed"]
    if step == record["since_step"] and step > 0:  # a checkpoint of the old files' stream
        trainer.input_position.assign(input_pipeline.START)
    if changed:
        log.warning("training tfrecords changed since step %d (%s): continuing on a new data "
                    "order (resume_on_changed_data), from the start of the new files' stream",
                    step, "; ".join(changed))
        return "; a new data order (the training tfrecords changed)"
    return ""


def check_init_is_not_finetuned(path: str) -> None:
    """Refuses a fine-tuning trial as init_checkpoint by name (it used to be reported only as
    a list of missing variables: it has task heads but no generator or discriminator head)."""
    trial_config = os.path.join(pretrained_vocab.checkpoint_dir(path),
                                model_dir_lib.FINETUNE_CONFIG_FILE)
    if not fs.isfile(trial_config):
        return
    settings = io_utils.read_json(trial_config).get("training_settings") or {}
    source = settings.get("init_checkpoint") if isinstance(settings, dict) else None
    raise HParamError(
        f"init_checkpoint {path} is a fine-tuned model ({trial_config}): it has task heads but "
        "no generator or discriminator head, so pre-training would start those from scratch. "
        "Give the pre-trained model it was fine-tuned from"
        + (f" ({source})" if isinstance(source, str) and source else ""))


def restore_or_init(config: PretrainingConfig, trainer: Trainer,
                    train_files: list[str] | None = None) -> str:
    """Resumes from the model dir's newest readable checkpoint, else applies init_checkpoint;
    returns what it did, for the log. With `train_files` (a training run), also settles the
    data order the run continues on (`continue_data`)."""
    latest = (checkpoint.latest_valid(config.model_dir, strict=True)
              if fs.isdir(config.model_dir) else None)
    saved_config = os.path.join(config.model_dir, model_dir_lib.PRETRAIN_CONFIG_FILE)
    if latest is not None:
        check_resume_vocab(config)
        if fs.exists(saved_config):
            changed = check_resume_compatible(config, saved_config)
            if changed:
                log.warning("resuming with changed hparams: %s", "; ".join(changed))
        # An eval-only run may read a model another run trains: pruned meanwhile, the newest.
        latest, _ = checkpoint.read_newest(latest, config.model_dir, trainer.restore)
        if config.init_checkpoint:
            log.info("model dir has checkpoints: init_checkpoint %s is ignored",
                     config.init_checkpoint)
        how = f"resumed from {latest} at step {trainer.global_step}"
        if train_files and config.do_train:
            how += continue_data(config, trainer, train_files)
        return how
    if train_files and config.do_train:
        trainer.data_record = data_record.fresh(train_files, config.seed)
    if config.init_checkpoint:
        check_init_is_not_finetuned(config.init_checkpoint)
        report = trainer.init_from(config.init_checkpoint, config.init_checkpoint_keep_step)
        heads = sorted({n.split("/")[1] for n in report.unused if n.startswith("task_specific/")})
        if heads and report.missing:
            raise HParamError(
                f"init_checkpoint {report.path} is a fine-tuned model (task heads {heads}) "
                f"without {len(report.missing)} of the pre-training variables (generator, "
                "discriminator head): give the pre-trained model it was fine-tuned from")
        if report.missing:
            log.warning("init_checkpoint lacks %d model variables (kept at their initial values): "
                        "%s", len(report.missing), ", ".join(report.missing[:10]))
        return (f"initialised {len(report.restored)} variables from {report.path} "
                f"(fresh optimizer state, step {trainer.global_step})")
    return "starting from scratch"
