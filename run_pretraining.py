"""Pre-trains an ELECTRA model (generator + discriminator) on tfrecords from build_pretraining_dataset.py.

    python run_pretraining.py --data-dir DATA --model-name NAME [--hparams JSON_OR_FILE]

reads DATA/pretrain_tfrecords/pretrain_data.tfrecord* and DATA/vocab.txt (continuing from hparam
init_checkpoint: the vocabulary beside it) and writes DATA/models/NAME: checkpoints with the
official variable names, pretrain_config.json (the resolved hparams), bert_config.json and
generator_config.json (official keys), a copy of the vocab, TensorBoard summaries and results/
(eval metrics as JSON and text).

Re-running the same command resumes from the newest readable checkpoint, exactly (weights,
optimizer slots, step and data position), whatever moment the previous run was killed at.
SIGTERM or Ctrl-C stops the run at the next step boundary with a checkpoint at that step.
Every run checks its health from its training batches (hparam health_every_steps, on by default;
held-out evals with do_eval or eval_every_steps check more): a stalled discriminator or an idle
generator is logged with what to try (pretrain/training_health.py; tools/inspect_run.py).

Exit status: 0 done, 2 bad input or settings, 3 diverged (NaN/Inf), 4 another worker of a
multi-worker run died (re-run every worker to resume), 5 out of memory (the message names the
batch and what to lower), 75 stopped by SIGTERM/SIGINT after saving (re-run to resume).
"""
import argparse
import contextlib
import dataclasses
import json
import logging
import os

from util import console  # first: keeps TensorFlow's start-up lines off the console

import tensorflow as tf

from configure_pretraining import PretrainingConfig
from model import model_dir as model_dir_lib
from pretrain import evaluation, input_pipeline, loop, run_setup
from pretrain.trainer import Trainer
from util import checkpoint, distribution, out_of_memory, place_locks, preemption, record_check
from util import workers
from util import training_utils as tu
from util.hparams import HParamError

log = logging.getLogger("electra.pretrain")


def _log_config(config: PretrainingConfig, trainer: Trainer) -> None:
    if console.verbose():
        log.info("Config: %s", json.dumps(config.to_dict(), sort_keys=True))
    elif config.do_train:
        log.info("config: %s", os.path.join(config.model_dir, model_dir_lib.PRETRAIN_CONFIG_FILE))
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
    tu.run_as_the_commands_run()  # before the strategy starts TensorFlow's context
    if strategy is None:
        strategy = distribution.make_strategy(config.strategy, config.tpu_name, config.tpu_zone,
                                              config.gcp_project)
        preemption.rearm()  # after the strategy: see util/preemption.py
    with distribution.leave_together(strategy) as parting:
        metrics = _train_or_eval(config, strategy)
    if parting.chief_outcome == "Preempted":  # the chief stopped in its own part of the eval
        raise preemption.Preempted("stopped on a signal to another worker during the final "
                                   "eval; re-run the same command to evaluate")
    if parting.chief_outcome not in (None, "done"):
        log.warning("the chief ended with %s after this worker's part was done; see its log",
                    parting.chief_outcome)
    return metrics


def _train_or_eval(config: PretrainingConfig, strategy: tf.distribute.Strategy) -> dict | None:
    chief = distribution.is_chief(strategy)
    special_ids, files = run_setup.check_run(config, chief)
    # Evaluating writes results into the model dir too: every chief run locks what it writes.
    with (place_locks.holding(run_setup.output_places(config)) if chief
          else contextlib.nullcontext()) as lock:
        trainer = Trainer(config, special_ids, strategy)
        _log_config(config, trainer)
        how = run_setup.restore_or_init(config, trainer, files.train)
        log.info("%s; training files: %d, held-out files: %d", how, len(files.train),
                 len(files.eval))
        monitor = evaluation.new_monitor(config) if chief else None
        try:
            if config.do_train:
                if chief:
                    run_setup.prepare_model_dir(config, trainer)
                loop.train(config, trainer, files, chief, lock, monitor)
            if config.do_eval:
                if preemption.requested(strategy):  # trained and saved; eval left to the re-run
                    raise preemption.Preempted(
                        f"stopped on a signal before the final eval at step "
                        f"{trainer.global_step}; re-run the same command to evaluate")
                if not config.do_train and checkpoint.latest_valid(config.model_dir) is None \
                        and not config.init_checkpoint:
                    raise ValueError(f"do_eval: no checkpoint in {config.model_dir} to evaluate")
                writer = tu.SummaryWriter(config.model_dir, enabled=chief)
                try:
                    return evaluation.run_eval(config, trainer, files.eval, chief, writer,
                                               monitor)
                finally:
                    writer.close()
        except tf.errors.DataLossError as e:
            raise record_check.damaged_file_error(
                files.train + files.eval, e, "pre-training tfrecord file",
                f". Stopped at step {trainer.global_step}; the checkpoints in {config.model_dir} "
                "are left as they were") from None
        return None


def evaluate(config: PretrainingConfig) -> dict:
    """Evaluates the newest checkpoint of the model dir (or init_checkpoint) on held-out data."""
    return train_or_eval(dataclasses.replace(config, do_train=False, do_eval=True))


def train_one_step(config: PretrainingConfig) -> float:
    """Builds the model and trains it for one step without writing anything; returns the loss."""
    trainer = Trainer(config, run_setup.load_special_ids(config))
    files = input_pipeline.find_files(config.pretrain_tfrecords, config.eval_tfrecords)
    result = trainer.train_steps(trainer.train_iterator(files.train), 1)
    log.info("loss after one step: %s", result.metrics["loss"])
    return result.metrics["loss"]


def _out_of_memory(error: BaseException, config: PretrainingConfig | None) -> str:
    if config is None:
        return out_of_memory.message(error, "these hparams", "lower train_batch_size")
    sizes = f"train_batch_size {config.train_batch_size}"
    if config.gradient_accumulation_steps > 1:
        sizes += f" in {config.gradient_accumulation_steps} micro-batches"
    if config.do_eval or config.eval_every_steps:
        sizes += f", eval_batch_size {config.eval_batch_size}"
    return out_of_memory.message(
        error, f"{sizes} and max_seq_length {config.max_seq_length}",
        "lower train_batch_size, or raise gradient_accumulation_steps (the same batch in "
        "smaller micro-batches), or set recompute_grad true; lower eval_batch_size for "
        "evaluation, or max_seq_length (data rebuilt for it, and resume_on_changed_data to "
        f"resume on it). Checkpoints already written in {config.model_dir} are kept: re-run "
        "with the new hparams to resume")


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
    console.add_verbose_flag(parser)
    args = parser.parse_args(argv)
    console.setup(args.verbose)
    config = None
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
    except out_of_memory.ERRORS as e:
        log.error("%s", _out_of_memory(e, config))
        return out_of_memory.EXIT_OUT_OF_MEMORY
    except workers.WorkerDied as e:
        log.error("%s", e)
        return workers.EXIT_WORKER_DIED
    except (ValueError, OSError, tu.RunLockError) as e:  # OSError: disk full, read-only
        log.error("%s", e)
        return 2
    return 0


if __name__ == "__main__":
    # Everything the run keeps is written and closed by now: skip the interpreter's teardown of
    # TensorFlow (about a second; a preempted run may not have it within its grace period).
    preemption.exit_now(main())
