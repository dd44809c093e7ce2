"""What the health checks (pretrain/health.py) cost: at an eval, and in every training run.

    python benchmarks/health_cost.py DATA/models/NAME [--repeats 3]
    python benchmarks/health_cost.py --training [--shape demo|small] [--steps 300] [--rounds 3]

With a model dir: restores its newest checkpoint with the run's own settings and times, each
after a first (tracing) call, the held-out eval (`num_eval_steps` batches), the token geometry
the collapse check reads (one forward pass of one held-out batch), and the state checks over the
run's recorded evals. Wall-clock means over --repeats calls; a loaded host inflates all three.

With --training: the checks every run makes between evals (pretrain/training_health.py, hparam
health_every_steps): two trainers of one shape on synthetic tfrecords, one with the checks at
their default and one with health_every_steps 0, train --steps steps each in blocks of
--block steps (iterations_per_loop) with the host's checks after each block, alternating for
--rounds rounds; prints each round's seconds, the median ratio, and the extra ops' own time
per step (median of --calls calls of pretrain_metrics.train_health_sums on the step's shapes).
--shape demo is demo.py's model (hidden 128, 3 layers, batch 32, seq 128, vocab 4000); small is
ELECTRA-Small (batch 128, seq 128, vocab 30522): minutes per round on a small CPU host.
"""
import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
import types

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from util import console  # noqa: E402,F401 -- first: TensorFlow's start-up lines stay off

from configure_pretraining import PretrainingConfig  # noqa: E402
from pretrain import evaluation, health, input_pipeline, run_setup  # noqa: E402
from pretrain.trainer import Trainer  # noqa: E402
from util import io_utils  # noqa: E402

# (hparams, vocabulary size) of the --training shapes.
SHAPES = {
    "demo": (dict(model_size="small", embedding_size=64, generator_hidden_size=0.25,
                  model_hparam_overrides={"hidden_size": 128, "num_hidden_layers": 3,
                                          "num_attention_heads": 2, "intermediate_size": 512},
                  train_batch_size=32, max_seq_length=128, learning_rate=1e-3,
                  adam_bias_correction=True, lr_decay_after_warmup=True), 4000),
    "small": (dict(model_size="small", train_batch_size=128, max_seq_length=128), 30522),
}


def _mean_seconds(fn, repeats: int):
    result = fn()  # the first call traces
    start = time.perf_counter()
    for _ in range(repeats):
        result = fn()
    return (time.perf_counter() - start) / repeats, result


def eval_cost(model_dir: str, repeats: int) -> None:
    """The eval's figures (see the module docstring)."""
    saved = io_utils.read_json(os.path.join(model_dir, "pretrain_config.json"))
    name, data_dir = saved.pop("model_name"), saved.pop("data_dir")
    config = PretrainingConfig.from_hparams(name, data_dir, saved)
    trainer = Trainer(config, run_setup.load_special_ids(config))
    trainer.restore(model_dir)
    files = input_pipeline.find_files(config.pretrain_tfrecords, config.eval_tfrecords).eval
    eval_secs, metrics = _mean_seconds(
        lambda: trainer.evaluate(files, config.num_eval_steps), repeats)
    geometry_secs, geometry = _mean_seconds(
        lambda: evaluation.geometry_metrics(config, trainer, files), repeats)
    metrics.update(geometry)
    history = evaluation.read_history(config)
    monitor_secs, _ = _mean_seconds(lambda: health.Monitor(
        health.RunFacts.of(config), history).after_eval(trainer.global_step + 1, metrics), 100)
    print(f"eval ({config.num_eval_steps} batches of {config.eval_batch_size}): "
          f"{eval_secs:.3f} s; token geometry (1 batch): {geometry_secs:.3f} s "
          f"({100 * geometry_secs / eval_secs:.1f}% of the eval); state checks over "
          f"{len(history)} evals: {1e3 * monitor_secs:.3f} ms")


class _Run:
    """A trainer and the checks run_pretraining.py makes after each block (pretrain/loop.py)."""

    def __init__(self, work: str, name: str, hparams: dict, files: list[str], warmup: int):
        from pretrain import masking, training_health
        from util import training_utils as tu
        import common
        self.config = PretrainingConfig.from_hparams("bench", work, hparams)
        self.trainer = Trainer(self.config, masking.SpecialIds(
            pad=common.PAD_ID, cls=common.CLS_ID, sep=common.SEP_ID, mask=common.MASK_ID))
        self.writer = tu.SummaryWriter(os.path.join(work, f"events_{name}"))
        monitor = health.Monitor(health.RunFacts.of(self.config))
        self.checks = training_health.HealthChecks(self.config.health_every_steps, monitor,
                                                   self.writer)
        self.iterator = self.trainer.train_iterator(files)
        self.trainer.train_steps(self.iterator, warmup)  # traces

    def train(self, steps: int, block: int) -> float:
        """Seconds for `steps` steps in blocks of `block`, with the checks after each."""
        start = time.perf_counter()
        for _ in range(steps // block):
            first = self.trainer.global_step
            result = self.trainer.train_steps(self.iterator, block)
            self.checks.after_block(result, first, self.trainer.global_step,
                                    self.trainer.learning_rate())
        self.writer.flush()
        return time.perf_counter() - start


def _health_ops_ms(hparams: dict, calls: int) -> float:
    """The extra ops' time per step: train_health_sums on one step's discriminator outputs."""
    import numpy as np
    import tensorflow as tf
    from pretrain import pretrain_metrics
    batch, seq = hparams["train_batch_size"], hparams["max_seq_length"]
    rng = np.random.RandomState(0)
    labels = (rng.rand(batch, seq) < 0.15).astype(np.int32)
    out = dict(input_mask=tf.ones([batch, seq], tf.int32), disc_labels=tf.constant(labels),
               disc_probs=tf.constant(rng.rand(batch, seq).astype(np.float32)),
               disc_preds=tf.constant((rng.rand(batch, seq) < 0.1).astype(np.int32)))
    fn = tf.function(lambda o: pretrain_metrics.train_health_sums(types.SimpleNamespace(**o)),
                     autograph=False)
    fn(out).numpy()
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        fn(out).numpy()
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def training_cost(args) -> None:
    """The A/B of the checks in training (see the module docstring)."""
    from pretrain_throughput import write_synthetic_tfrecords
    shape, vocab = SHAPES[args.shape]
    work = tempfile.mkdtemp(prefix="health_cost_")
    try:
        train_file = write_synthetic_tfrecords(work, shape["max_seq_length"], count=1024,
                                               vocab=vocab)
        base = dict(shape, vocab_size=vocab, num_warmup_steps=0, iterations_per_loop=args.block,
                    num_train_steps=10 ** 6, pretrain_tfrecords=train_file)
        runs = {name: _Run(work, name, dict(base, health_every_steps=every), [train_file],
                           args.warmup)
                for name, every in (("off", 0), ("on", PretrainingConfig().health_every_steps))}
        times = {name: [] for name in runs}
        for round_index in range(args.rounds):
            for name in (("off", "on") if round_index % 2 == 0 else ("on", "off")):
                times[name].append(runs[name].train(args.steps, args.block))
            print(f"round {round_index + 1}: " + ", ".join(
                f"{name} {times[name][-1]:.2f} s" for name in runs), flush=True)
        _print_training(args, shape, times, _health_ops_ms(shape, args.calls))
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _print_training(args, shape: dict, times: dict, ops_ms: float) -> None:
    ratios = [on / off for on, off in zip(times["on"], times["off"])]
    step_ms = 1e3 * statistics.median(times["off"]) / args.steps
    print(f"{args.shape} shape (batch {shape['train_batch_size']}, seq "
          f"{shape['max_seq_length']}), {args.steps} steps per round in blocks of {args.block}, "
          f"{args.rounds} alternating rounds; load {os.getloadavg()[0]:.2f}")
    print(f"checks off: median {statistics.median(times['off']):.2f} s ({step_ms:.1f} ms/step); "
          f"on: median {statistics.median(times['on']):.2f} s; on/off per round "
          + ", ".join(f"{r:.4f}" for r in ratios)
          + f"; median {statistics.median(ratios):.4f}")
    print(f"the extra ops alone: {ops_ms:.3f} ms per step ({100 * ops_ms / step_ms:.2f}% of a "
          "step)")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model_dir", nargs="?", help="a pre-training model dir with a checkpoint")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--training", action="store_true",
                        help="time training with and without the between-evals checks")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="demo")
    parser.add_argument("--steps", type=int, default=300, help="timed steps per round and run")
    parser.add_argument("--block", type=int, default=50, help="steps per block (demo.py: 50)")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps (the first traces)")
    parser.add_argument("--calls", type=int, default=200, help="calls timing the extra ops")
    args = parser.parse_args(argv)
    if args.training:
        training_cost(args)
    elif args.model_dir:
        eval_cost(args.model_dir, args.repeats)
    else:
        parser.error("give a model dir, or --training")
    return 0


if __name__ == "__main__":
    sys.exit(main())
