"""Held-out evaluation of a pre-training run: its data checked up front, the metrics (and linear
probes, model/probing.py, and the health checks, pretrain/health.py), and the results files.

results/ holds the newest evaluation (`results_json`, `results_txt`) and every evaluation by step
(HISTORY_FILE), so a resumed run knows whether the eval of its last checkpoint is still owed and
which health states were already announced. Each carries `health`: {state: step it began}.
"""
import functools
import logging
import os
import time

import tensorflow as tf

from configure_pretraining import PretrainingConfig
from model import probing, tokenization
from pretrain import health, input_pipeline, pretrain_data
from pretrain.trainer import Trainer
from util import fs, io_utils, record_check
from util import training_utils as tu

log = logging.getLogger(__name__)

HISTORY_FILE = "unsup_results_history.json"


def check_eval_data(config: PretrainingConfig, files: input_pipeline.DataFiles) -> None:
    """Before any training: the probe data reads, and there is held-out data to evaluate on."""
    if config.probe_tasks:  # read the probe data now: a bad file stops the run before training
        _probe_tasks(tuple(sorted(config.probe_tasks.items())), config.probe_train_size)
    try:
        available = input_pipeline.count_records(files.eval)
    except tf.errors.DataLossError as e:
        raise record_check.damaged_file_error(files.eval, e, "held-out tfrecord file") from None
    if available == 0 and config.eval_tfrecords:
        raise ValueError(f"hparam eval_tfrecords={config.eval_tfrecords!r} matches "
                         f"{'no file' if not files.eval else 'only empty files'}; do_eval and "
                         "eval_every_steps need held-out data there")
    if available == 0:
        raise ValueError("do_eval and eval_every_steps need held-out data: "
                         f"{_why_no_held_out_data(files)}set hparam eval_tfrecords, or build the "
                         "data with held-out shards (metadata.json 'eval_files')")
    needed = config.num_eval_steps * config.eval_batch_size
    if available < needed:
        log.info("held-out set has %d examples; %d eval batches of %d reuse some of them",
                 available, config.num_eval_steps, config.eval_batch_size)


def _why_no_held_out_data(files: input_pipeline.DataFiles) -> str:
    """What the data's metadata.json says of its held-out split (a corpus too small for one
    builds without it), as the start of a sentence; "" when there is no metadata to read."""
    for directory in sorted({os.path.dirname(f) for f in files.train}):
        path = os.path.join(directory, pretrain_data.METADATA_FILE)
        try:
            metadata = io_utils.read_json(path) if fs.isfile(path) else None
        except ValueError:
            continue
        if not isinstance(metadata, dict):
            continue
        corpus = (metadata.get("corpus") or {}).get("dir", "its corpus")
        if files.eval:
            return (f"the held-out shards of {directory} hold no example ({corpus} was too small "
                    "for a held-out split); ")
        fraction = metadata.get("eval_fraction")
        why = (f", but {corpus} was too small for a held-out split: see the build's warning"
               if fraction else "")
        return (f"{directory} was built without held-out shards (--eval-fraction "
                f"{fraction}{why}); ")
    return ""


@functools.lru_cache(maxsize=1)
def _probe_tasks(probe_tasks: tuple, train_size: int) -> list:
    """The probe_tasks' data, read once per process (probing.ProbeDataError names file and line)."""
    return [probing.load_task(name, path, train_size) for name, path in probe_tasks]


@functools.lru_cache(maxsize=1)
def _extractor(encoder, vocab_file: str, do_lower_case: bool,
               max_seq_length: int) -> probing.FeatureExtractor:
    """The probes' feature extractor, built (its forward pass traced) once per run, not per eval."""
    tokenizer = tokenization.build_tokenizer(vocab_file=vocab_file, do_lower_case=do_lower_case)
    return probing.FeatureExtractor(encoder, tokenizer, max_seq_length)


def probe_metrics(config: PretrainingConfig, trainer: Trainer) -> dict:
    """{"probe/<task>/<feature>": accuracy} of linear probes on the discriminator's frozen
    features (model/probing.py); empty without probe_tasks."""
    if not config.probe_tasks:
        return {}
    tasks = _probe_tasks(tuple(sorted(config.probe_tasks.items())), config.probe_train_size)
    extractor = _extractor(trainer.model.discriminator_encoder, config.vocab_file,
                           config.do_lower_case, config.max_seq_length)
    return {f"probe/{key}": value for key, value in probing.run_probes(extractor, tasks).items()}


def geometry_metrics(config: PretrainingConfig, trainer: Trainer, files: list[str]) -> dict:
    """health.token_geometry of the discriminator's last layer on the real tokens of the first
    held-out batch (unmasked text): what the collapse check reads."""
    features = trainer.first_eval_batch(files)
    out = trainer.model.discriminator_encoder(features["input_ids"], features["input_mask"],
                                              features["segment_ids"], training=False)
    real = features["input_mask"].numpy() > 0
    return health.token_geometry(tf.cast(out.sequence_output, tf.float32).numpy()[real])


def _history_path(config: PretrainingConfig) -> str:
    return os.path.join(os.path.dirname(config.results_json), HISTORY_FILE)


def read_history(config: PretrainingConfig) -> list[dict]:
    """Every recorded eval of the run, oldest first."""
    path = _history_path(config)
    return io_utils.read_json(path) if fs.exists(path) else []


def write_eval(config: PretrainingConfig, metrics: dict, step: int,
               run_health: dict | None = None) -> None:
    results = dict(metrics, global_step=step)
    if run_health is not None:
        results["health"] = run_health
    header = f"eval at step {step} on held-out data ({config.num_eval_steps} batches of " \
             f"{config.eval_batch_size})"
    tu.write_results(config.results_json, config.results_txt, results, header)
    history = [h for h in read_history(config) if h.get("global_step") != step] + [results]
    io_utils.write_json(_history_path(config), sorted(history, key=lambda h: h["global_step"]))


def has_eval(config: PretrainingConfig, step: int) -> bool:
    history_path = _history_path(config)
    if not fs.exists(history_path):
        return False
    return any(h.get("global_step") == step for h in io_utils.read_json(history_path))


def new_monitor(config: PretrainingConfig) -> health.Monitor:
    """The run's health monitor, resumed from the recorded evals."""
    return health.Monitor(health.RunFacts.of(config), read_history(config))


def run_eval(config: PretrainingConfig, trainer: Trainer, files: list[str], chief: bool,
             writer: tu.SummaryWriter | None = None,
             monitor: health.Monitor | None = None) -> dict:
    """Evaluates the trainer's model on `files`; the chief runs the probes and the health
    checks and writes results."""
    start = time.time()
    metrics = trainer.evaluate(files, config.num_eval_steps)
    step = trainer.global_step
    if chief:  # probes and checks read no distributed data: the chief alone runs them
        metrics.update(probe_metrics(config, trainer))
        metrics.update(geometry_metrics(config, trainer, files))
        monitor = monitor or new_monitor(config)
        run_health = monitor.after_eval(step, metrics)
        write_eval(config, metrics, step, run_health)
        if writer is not None:
            writer.scalars(step, metrics, prefix="eval/")
            writer.scalars(step, {name: float(name in run_health) for name in health.BY_NAME},
                           prefix="health/")
            writer.flush()
    shown = ", ".join(f"{k} = {v:.4f}" for k, v in sorted(metrics.items()))
    if chief:
        shown += f"; health: {health.line(run_health)}"
    log.info("eval at step %d (%s): %s", step, tu.secs_to_str(time.time() - start), shown)
    return metrics
