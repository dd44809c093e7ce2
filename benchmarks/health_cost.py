"""What the health checks (pretrain/health.py) add to a pre-training eval, on a trained model dir.

    python benchmarks/health_cost.py DATA/models/NAME [--repeats 3]

Restores the newest checkpoint with the run's own settings and times, each after a first
(tracing) call: the held-out eval (`num_eval_steps` batches), the token geometry the collapse
check reads (one forward pass of one held-out batch), and the state checks over the run's
recorded evals. Wall-clock means over --repeats calls; a loaded host inflates all three alike.
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from util import console  # noqa: E402,F401 -- first: TensorFlow's start-up lines stay off

from configure_pretraining import PretrainingConfig  # noqa: E402
from pretrain import evaluation, health, input_pipeline, run_setup  # noqa: E402
from pretrain.trainer import Trainer  # noqa: E402
from util import io_utils  # noqa: E402


def _mean_seconds(fn, repeats: int):
    result = fn()  # the first call traces
    start = time.perf_counter()
    for _ in range(repeats):
        result = fn()
    return (time.perf_counter() - start) / repeats, result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model_dir", help="a pre-training model dir with a checkpoint")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    saved = io_utils.read_json(os.path.join(args.model_dir, "pretrain_config.json"))
    name, data_dir = saved.pop("model_name"), saved.pop("data_dir")
    config = PretrainingConfig.from_hparams(name, data_dir, saved)
    trainer = Trainer(config, run_setup.load_special_ids(config))
    trainer.restore(args.model_dir)
    files = input_pipeline.find_files(config.pretrain_tfrecords, config.eval_tfrecords).eval
    eval_secs, metrics = _mean_seconds(
        lambda: trainer.evaluate(files, config.num_eval_steps), args.repeats)
    geometry_secs, geometry = _mean_seconds(
        lambda: evaluation.geometry_metrics(config, trainer, files), args.repeats)
    metrics.update(geometry)
    history = evaluation.read_history(config)
    monitor_secs, _ = _mean_seconds(lambda: health.Monitor(
        health.RunFacts.of(config), history).after_eval(trainer.global_step + 1, metrics), 100)
    print(f"eval ({config.num_eval_steps} batches of {config.eval_batch_size}): "
          f"{eval_secs:.3f} s; token geometry (1 batch): {geometry_secs:.3f} s "
          f"({100 * geometry_secs / eval_secs:.1f}% of the eval); state checks over "
          f"{len(history)} evals: {1e3 * monitor_secs:.3f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
