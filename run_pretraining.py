"""Pre-trains an ELECTRA model (generator + discriminator) on tfrecords from build_pretraining_dataset.py.

    python run_pretraining.py --data-dir DATA --model-name NAME [--hparams JSON_OR_FILE]

reads DATA/pretrain_tfrecords/pretrain_data.tfrecord* and DATA/vocab.txt and writes
DATA/models/NAME: checkpoints with the official variable names, pretrain_config.json (the
resolved hparams), bert_config.json and generator_config.json (official keys), a copy of the
vocab, TensorBoard summaries and results/ (eval metrics as JSON and text).

Re-running the same command resumes from the newest readable checkpoint, exactly (weights,
optimizer slots, step and data position), whatever moment the previous run was killed at.
SIGTERM or Ctrl-C stops the run at the next step boundary with a checkpoint at that step.

Exit status: 0 done, 2 bad input or settings, 3 diverged (NaN/Inf), 75 stopped by SIGTERM/SIGINT
after saving (re-run to resume).
"""
import argparse
import dataclasses
import filecmp
import functools
import json
import logging
import math
import os
import shutil
import sys
import time

import tensorflow as tf

from configure_pretraining import PretrainingConfig
from model import model_dir as model_dir_lib
from model import probing, tokenization
from pretrain import input_pipeline
from pretrain.masking import SpecialIds
from pretrain.trainer import Trainer
from util import checkpoint, distribution, io_utils, preemption, record_check, resume
from util import training_utils as tu
from util.hparams import HParamError

log = logging.getLogger("electra.pretrain")

CONFIG_FILE = "pretrain_config.json"
BERT_CONFIG_FILE = "bert_config.json"
GENERATOR_CONFIG_FILE = "generator_config.json"
HISTORY_FILE = "unsup_results_history.json"
# Hparams whose change makes existing checkpoints a different model: resuming is refused.
ARCHITECTURE_KEYS = ("model_size", "model_hparam_overrides", "embedding_size", "vocab_size",
                     "debug", "electra_objective", "uniform_generator", "untied_generator",
                     "untied_generator_embeddings", "generator_hidden_size", "generator_layers",
                     "two_tower_generator",
                     # the objectives of configure_pretraining (pretrain/objectives/)
                     "replace_mlm", "all_tokens_mlm", "unigram_generator",
                     "adversarial_generator", "freeze_generator", "electric_objective")


class IncompatibleResumeError(ValueError):
    """The model dir holds checkpoints of a model the current hparams do not describe."""


def load_special_ids(config: PretrainingConfig) -> SpecialIds:
    """Special token ids from the vocab file; its size must equal hparam vocab_size."""
    vocab = tokenization.load_vocab(config.vocab_file)
    if len(vocab) != config.vocab_size:
        raise HParamError(
            f"vocab file {config.vocab_file} has {len(vocab)} tokens but hparam vocab_size is "
            f"{config.vocab_size}; set \"vocab_size\": {len(vocab)} in --hparams")
    return SpecialIds.from_vocab(vocab, where=f"vocab file {config.vocab_file}")


def check_data_matches(config: PretrainingConfig, files: input_pipeline.DataFiles) -> None:
    """Refuses tfrecords built for another max_seq_length or vocabulary size (they would fail
    deep inside tf.data, or index past the embedding table), naming the file that says so."""
    directory = os.path.dirname(files.train[0])
    metadata_path = os.path.join(directory, "metadata.json")
    if os.path.isfile(metadata_path):
        metadata = io_utils.read_json(metadata_path)
        built_sha = metadata.get("vocab_sha256")
        # Same size is not enough: another vocabulary gives the ids other meanings.
        if isinstance(built_sha, str) and built_sha != io_utils.sha256_file(config.vocab_file):
            raise HParamError(
                f"vocabulary {config.vocab_file} is not the one the tfrecords in {directory} "
                f"were built with ({metadata.get('vocab_file', '?')}, sha256 {built_sha[:12]}... "
                f"in {metadata_path}); set \"vocab_file\" to that vocabulary, or rebuild the "
                "data with this one")
        for key in ("max_seq_length", "vocab_size"):
            built, wanted = metadata.get(key), getattr(config, key)
            if isinstance(built, int) and built != wanted:
                raise HParamError(
                    f"the tfrecords in {directory} were built with {key} {built} "
                    f"({metadata_path}) but hparam {key} is {wanted}; set \"{key}\": {built} "
                    "or rebuild the data")
        sizes = metadata.get("shard_bytes")
        for path in (files.train + files.eval) if isinstance(sizes, dict) else ():
            expected = sizes.get(os.path.basename(path)) if os.path.dirname(path) == directory \
                else None
            if isinstance(expected, int) and os.path.getsize(path) != expected:
                raise record_check.DamagedRecordFileError(
                    f"pre-training tfrecord file {path} has {os.path.getsize(path)} bytes but "
                    f"the build wrote {expected} ({metadata_path}): a truncated or partial copy; "
                    "copy it again or rebuild the data")
    first = next((f for f in files.train if os.path.getsize(f) > 0), None)
    for record in tf.data.TFRecordDataset(first).take(1):
        example = tf.train.Example.FromString(record.numpy())
        length = len(example.features.feature["input_ids"].int64_list.value)
        if length != config.max_seq_length:
            raise HParamError(
                f"{first} holds examples of {length} tokens but hparam max_seq_length is "
                f"{config.max_seq_length}; set \"max_seq_length\": {length} or rebuild the data")


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
    if saved is None or os.path.abspath(saved) == os.path.abspath(config.vocab_file):
        return
    if os.path.basename(saved) != os.path.basename(_vocab_copy_path(config)) or not filecmp.cmp(
            saved, config.vocab_file, shallow=False):
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
    io_utils.write_json(os.path.join(d, CONFIG_FILE), config.to_dict())
    io_utils.write_text(os.path.join(d, BERT_CONFIG_FILE),
                        trainer.model.disc_config.to_json_string() + "\n")
    if trainer.model.generator_config is not None:
        io_utils.write_text(os.path.join(d, GENERATOR_CONFIG_FILE),
                            trainer.model.generator_config.to_json_string() + "\n")
    vocab_copy = _vocab_copy_path(config)
    if os.path.abspath(vocab_copy) != os.path.abspath(config.vocab_file) and not (
            os.path.exists(vocab_copy) and filecmp.cmp(vocab_copy, config.vocab_file, False)):
        with open(config.vocab_file, "rb") as src, io_utils.atomic_open(vocab_copy, "wb") as dst:
            shutil.copyfileobj(src, dst)


def check_init_is_not_finetuned(path: str) -> None:
    """Refuses a fine-tuning trial as init_checkpoint by name (it used to be reported only as
    a list of missing variables: it has task heads but no generator or discriminator head)."""
    directory = path if os.path.isdir(path) else os.path.dirname(path)
    trial_config = os.path.join(directory, model_dir_lib.FINETUNE_CONFIG_FILE)
    if not os.path.isfile(trial_config):
        return
    settings = io_utils.read_json(trial_config).get("training_settings") or {}
    source = settings.get("init_checkpoint") if isinstance(settings, dict) else None
    raise HParamError(
        f"init_checkpoint {path} is a fine-tuned model ({trial_config}): it has task heads but "
        "no generator or discriminator head, so pre-training would start those from scratch. "
        "Give the pre-trained model it was fine-tuned from"
        + (f" ({source})" if isinstance(source, str) and source else ""))


def _restore_or_init(config: PretrainingConfig, trainer: Trainer) -> str:
    """Resumes from the model dir's newest readable checkpoint, else applies init_checkpoint."""
    latest = (checkpoint.latest_valid(config.model_dir, strict=True)
              if os.path.isdir(config.model_dir) else None)
    saved_config = os.path.join(config.model_dir, CONFIG_FILE)
    if latest is not None:
        check_resume_vocab(config)
        if os.path.exists(saved_config):
            changed = check_resume_compatible(config, saved_config)
            if changed:
                log.warning("resuming with changed hparams: %s", "; ".join(changed))
        trainer.restore(latest)
        if config.init_checkpoint:
            log.info("model dir has checkpoints: init_checkpoint %s is ignored",
                     config.init_checkpoint)
        return f"resumed from {latest} at step {trainer.global_step}"
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


def _write_eval(config: PretrainingConfig, metrics: dict, step: int) -> None:
    results = dict(metrics, global_step=step)
    header = f"eval at step {step} on held-out data ({config.num_eval_steps} batches of " \
             f"{config.eval_batch_size})"
    tu.write_results(config.results_json, config.results_txt, results, header)
    history_path = os.path.join(os.path.dirname(config.results_json), HISTORY_FILE)
    history = io_utils.read_json(history_path) if os.path.exists(history_path) else []
    history = [h for h in history if h.get("global_step") != step] + [results]
    io_utils.write_json(history_path, sorted(history, key=lambda h: h["global_step"]))


def _has_eval(config: PretrainingConfig, step: int) -> bool:
    history_path = os.path.join(os.path.dirname(config.results_json), HISTORY_FILE)
    if not os.path.exists(history_path):
        return False
    return any(h.get("global_step") == step for h in io_utils.read_json(history_path))


@functools.lru_cache(maxsize=1)
def _probe_tasks(probe_tasks: tuple, train_size: int) -> list:
    """The probe_tasks' data, read once per process (probing.ProbeDataError names file and line)."""
    return [probing.load_task(name, path, train_size) for name, path in probe_tasks]


def probe_metrics(config: PretrainingConfig, trainer: Trainer) -> dict:
    """{"probe/<task>/<feature>": accuracy} of linear probes on the discriminator's frozen
    features (model/probing.py); empty without probe_tasks."""
    if not config.probe_tasks:
        return {}
    tasks = _probe_tasks(tuple(sorted(config.probe_tasks.items())), config.probe_train_size)
    tokenizer = tokenization.build_tokenizer(vocab_file=config.vocab_file,
                                             do_lower_case=config.do_lower_case)
    extractor = probing.FeatureExtractor(trainer.model.discriminator_encoder, tokenizer,
                                         config.max_seq_length)
    return {f"probe/{key}": value for key, value in probing.run_probes(extractor, tasks).items()}


def run_eval(config: PretrainingConfig, trainer: Trainer, files: list[str], chief: bool,
             writer: tu.SummaryWriter | None = None) -> dict:
    start = time.time()
    metrics = trainer.evaluate(files, config.num_eval_steps)
    if chief:  # probes read no distributed data: the chief alone runs them
        metrics.update(probe_metrics(config, trainer))
    step = trainer.global_step
    if chief:
        _write_eval(config, metrics, step)
        if writer is not None:
            writer.scalars(step, metrics, prefix="eval/")
            writer.flush()
    shown = ", ".join(f"{k} = {v:.4f}" for k, v in sorted(metrics.items()))
    log.info("eval at step %d (%s): %s", step, tu.secs_to_str(time.time() - start), shown)
    return metrics


def _next_stop(step: int, config: PretrainingConfig) -> int:
    stops = [config.num_train_steps, step + max(1, config.iterations_per_loop)]
    for every in (config.save_checkpoints_steps, config.eval_every_steps):
        if every and every > 0:
            stops.append((step // every + 1) * every)
    return min(stops)


def _stop_for_preemption(trainer: Trainer, saved_step: int, save) -> None:
    """After a signal (util/preemption.py): saves unless the newest checkpoint is at this step,
    then raises Preempted."""
    if trainer.global_step != saved_step:
        save("preempted")
    raise preemption.stopped(trainer.global_step)


def train(config: PretrainingConfig, trainer: Trainer, files: input_pipeline.DataFiles,
          chief: bool, lock: tu.RunLock | None = None) -> None:
    manager = checkpoint.CheckpointManager(config.model_dir, config.keep_checkpoint_max)
    step = trainer.global_step
    if step >= config.num_train_steps:
        log.info("already trained: step %d >= num_train_steps %d", step, config.num_train_steps)
        return
    writer = tu.SummaryWriter(config.model_dir, enabled=chief)
    progress = tu.Progress(config.num_train_steps, initial=step, enabled=chief,
                           min_log_interval=10.0)
    iterator = trainer.train_iterator(files.train)
    last_saved = manager.latest()
    saved_step = step  # the state at `step` is on disk (restored from it, or step 0)
    start = last_save_time = time.time()

    def save(why: str) -> str | None:
        if not chief:
            return manager.latest()
        path = manager.save(trainer.checkpoint_tensors(), trainer.global_step)
        writer.flush()
        progress.write(f"saved checkpoint {path} (step {trainer.global_step}, {why}, "
                       f"{tu.secs_to_str(time.time() - start)} this run)")
        return path

    try:
        if config.eval_every_steps > 0 and step % config.eval_every_steps == 0 and \
                0 < step < config.num_train_steps and not _has_eval(config, step) and \
                not preemption.requested():
            # The previous run stopped between this checkpoint and its eval: still owed.
            run_eval(config, trainer, files.eval, chief, writer)
        while step < config.num_train_steps:
            if preemption.requested():
                _stop_for_preemption(trainer, saved_step, save)
            loop_start = time.time()
            result = trainer.train_steps(
                iterator, _next_stop(step, config) - step,
                deadline=preemption.deadline(last_save_time, config.save_checkpoints_secs))
            elapsed = time.time() - loop_start
            new_step = trainer.global_step
            if not result.finite:
                shown = ", ".join(f"{k}={v:.4g}" for k, v in result.bad_metrics.items())
                raise tu.NonFiniteError(
                    f"non-finite loss or gradient at step {new_step + 1} ({shown}); the update "
                    f"was not applied and training stopped. Last good checkpoint: "
                    f"{last_saved or 'none'} (left in place)", step=new_step + 1,
                    names=[k for k, v in result.bad_metrics.items() if not math.isfinite(v)])
            lr = trainer.learning_rate()
            examples = result.steps_run * config.train_batch_size
            progress.update(new_step, examples=examples, loss=result.metrics["loss"], lr=lr)
            scalars = dict(result.metrics, learning_rate=lr,
                           examples_per_sec=examples / max(elapsed, 1e-9),
                           steps_per_sec=result.steps_run / max(elapsed, 1e-9))
            if trainer.float16:
                scalars["loss_scale"] = float(trainer.loss_scale.numpy())
                if result.steps_applied < result.steps_run:
                    progress.write(f"float16: skipped {result.steps_run - result.steps_applied} "
                                   f"overflowing step(s) before step {new_step}")
            writer.scalars(new_step, scalars, prefix="train/")
            if lock is not None:
                lock.heartbeat()
            step = new_step
            if result.stop_reason == preemption.StopReason.PREEMPTED or preemption.requested():
                _stop_for_preemption(trainer, saved_step, save)
            done = step >= config.num_train_steps
            by_steps = config.save_checkpoints_steps > 0 and \
                step % config.save_checkpoints_steps == 0
            if done or by_steps or result.stop_reason == preemption.StopReason.TIMED:
                why = "end of training" if done else "every %s" % (
                    f"{config.save_checkpoints_steps} steps" if by_steps else
                    f"{config.save_checkpoints_secs:g} s")
                last_saved = save(f"{why}, loss {result.metrics['loss']:.4f}, lr {lr:.3g}")
                saved_step, last_save_time = step, time.time()
            # Periodic eval; the final one is do_eval's (after training).
            if config.eval_every_steps > 0 and step % config.eval_every_steps == 0 and not (
                    done and config.do_eval):
                run_eval(config, trainer, files.eval, chief, writer)
    finally:
        progress.close()
        writer.close()


def _log_config(config: PretrainingConfig, trainer: Trainer) -> None:
    log.info("Config: %s", json.dumps(config.to_dict(), sort_keys=True))
    disc = trainer.model.disc_config
    gen = trainer.model.generator_config
    params = sum(int(tf.size(v)) for v in trainer.model_vars.values())
    log.info("discriminator: %d layers, hidden %d, embedding %d; generator: %s; %d parameters; "
             "%d replica(s), XLA %s, compute %s", disc.num_hidden_layers, disc.hidden_size,
             disc.embedding_size,
             "uniform" if gen is None else f"{gen.num_hidden_layers} layers, hidden {gen.hidden_size}",
             params, trainer.strategy.num_replicas_in_sync, "on" if trainer.use_xla else "off",
             config.compute_dtype)


def train_or_eval(config: PretrainingConfig, strategy: tf.distribute.Strategy | None = None
                  ) -> dict | None:
    """Trains (do_train) and/or evaluates (do_eval); returns the final eval metrics if any."""
    if not (config.do_train or config.do_eval):
        raise HParamError("nothing to do: set do_train and/or do_eval to true")
    if strategy is None:
        strategy = distribution.make_strategy(config.strategy, config.tpu_name, config.tpu_zone,
                                              config.gcp_project)
        preemption.rearm()  # after the strategy: see util/preemption.py
    chief = distribution.is_chief(strategy)
    special_ids = load_special_ids(config)
    files = input_pipeline.find_files(config.pretrain_tfrecords, config.eval_tfrecords)
    check_data_matches(config, files)
    if config.do_eval or (config.do_train and config.eval_every_steps > 0):
        if config.probe_tasks:  # read the probe data now: a bad file stops the run before training
            _probe_tasks(tuple(sorted(config.probe_tasks.items())), config.probe_train_size)
        try:
            available = input_pipeline.count_records(files.eval)
        except tf.errors.DataLossError as e:
            raise record_check.damaged_file_error(files.eval, e, "held-out tfrecord file") \
                from None
        if available == 0 and config.eval_tfrecords:
            raise ValueError(f"hparam eval_tfrecords={config.eval_tfrecords!r} matches "
                             f"{'no file' if not files.eval else 'only empty files'}; do_eval and "
                             "eval_every_steps need held-out data there")
        if available == 0:
            raise ValueError("do_eval and eval_every_steps need held-out data: set hparam "
                             "eval_tfrecords, or build the data with held-out shards "
                             "(metadata.json 'eval_files')")
        needed = config.num_eval_steps * config.eval_batch_size
        if available < needed:
            log.info("held-out set has %d examples; %d eval batches of %d reuse some of them",
                     available, config.num_eval_steps, config.eval_batch_size)
    checkpoint.check_path(config.model_dir, "model dir")
    config.check_output_paths(["results_txt", "results_json"], [])
    if chief and config.do_train:
        ok, reason = tu.is_writable_dir(config.model_dir)
        if not ok:
            raise ValueError(f"cannot write to model dir {config.model_dir}: {reason}")
    lock = tu.RunLock(config.model_dir) if chief and config.do_train else None
    if lock is not None:
        lock.acquire()
    try:
        trainer = Trainer(config, special_ids, strategy)
        _log_config(config, trainer)
        how = _restore_or_init(config, trainer)
        log.info("%s; training files: %d, held-out files: %d", how, len(files.train),
                 len(files.eval))
        try:
            if config.do_train:
                if chief:
                    prepare_model_dir(config, trainer)
                train(config, trainer, files, chief, lock)
            if config.do_eval:
                if preemption.requested():  # trained and saved; the eval is left to the re-run
                    raise preemption.Preempted(
                        f"stopped on a signal before the final eval at step "
                        f"{trainer.global_step}; re-run the same command to evaluate")
                if not config.do_train and checkpoint.latest_valid(config.model_dir) is None \
                        and not config.init_checkpoint:
                    raise ValueError(f"do_eval: no checkpoint in {config.model_dir} to evaluate")
                return run_eval(config, trainer, files.eval, chief)
        except tf.errors.DataLossError as e:
            raise record_check.damaged_file_error(
                files.train + files.eval, e, "pre-training tfrecord file",
                f". Stopped at step {trainer.global_step}; the checkpoints in {config.model_dir} "
                "are left as they were") from None
        return None
    finally:
        if lock is not None:
            lock.release()


def evaluate(config: PretrainingConfig) -> dict:
    """Evaluates the newest checkpoint of the model dir (or init_checkpoint) on held-out data."""
    return train_or_eval(dataclasses.replace(config, do_train=False, do_eval=True))


def train_one_step(config: PretrainingConfig) -> float:
    """Builds the model and trains it for one step without writing anything; returns the loss."""
    trainer = Trainer(config, load_special_ids(config))
    files = input_pipeline.find_files(config.pretrain_tfrecords, config.eval_tfrecords)
    result = trainer.train_steps(trainer.train_iterator(files.train), 1)
    log.info("loss after one step: %s", result.metrics["loss"])
    return result.metrics["loss"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="""examples:
  python run_pretraining.py --data-dir data --model-name electra_small
  python run_pretraining.py --data-dir data --model-name debug --hparams '{"debug": true}'
  python run_pretraining.py --data-dir data --model-name electra_base --hparams base.json
  python run_pretraining.py --data-dir data --model-name electra_small \\
      --hparams '{"do_train": false, "do_eval": true}'        # evaluate only
Re-running a command resumes it. Every hparam: docs/HPARAMS.md.""")
    parser.add_argument("--data-dir", required=True,
                        help="directory of pretrain_tfrecords/, vocab.txt and models/. "
                             "Example: --data-dir data")
    parser.add_argument("--model-name", required=True,
                        help="name of the model; it is written to <data-dir>/models/<name>. "
                             "Example: --model-name electra_small")
    parser.add_argument("--hparams", default="{}",
                        help="JSON object of hparams, or the path of a .json file holding one. "
                             "Example: --hparams '{\"model_size\": \"base\"}'")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s",
                        stream=sys.stderr)
    try:
        with preemption.install():
            config = PretrainingConfig.from_hparams(args.model_name, args.data_dir, args.hparams)
            train_or_eval(config)
    except preemption.Preempted as e:
        log.warning("%s", e)
        return preemption.EXIT_PREEMPTED
    except tu.NonFiniteError as e:
        log.error("%s", e)
        return 3
    except (ValueError, OSError, tu.RunLockError) as e:  # OSError: disk full, read-only
        log.error("%s", e)
        return 2
    return 0


if __name__ == "__main__":
    status = main()
    if status == preemption.EXIT_PREEMPTED:
        preemption.exit_now(status)  # within the grace period: skip the interpreter's teardown
    sys.exit(status)
