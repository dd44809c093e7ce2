"""How soon after warm-up a healthy discriminator looks like a stalled one: the grace of the
discriminator checks (pretrain/health.py, GRACE_STEPS) is set from what this prints.

    python benchmarks/health_grace.py CORPUS_FILE VOCAB_FILE WORK_DIR [--steps 60] [--every 5]
        [--warmup 20 5] [--runs corrected uniform official]

Builds tfrecords of one corpus file (10% held out), then trains tests/test_health_runs.py's tiny
real-text recipe (hidden 128, 2 layers, generator 1/4 wide, batch 16, lr 1e-3) for each run and
warm-up, with a held-out eval (4 batches of 16) every --every steps. Per eval: the real-token
AUC, the share of real tokens called replaced against the share replaced, and whether the
discriminator checks' conditions hold at that eval alone (`stalled`: calls almost none replaced
and ranks near chance; `constant`: calls almost all replaced and ranks near chance), without any
grace. "corrected" and "uniform" are healthy runs; "official" (Adam without bias correction)
stalls for real.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from util import console  # noqa: E402,F401 -- first: TensorFlow's start-up lines stay off

import build_pretraining_dataset  # noqa: E402
from configure_pretraining import PretrainingConfig  # noqa: E402
from pretrain import health, input_pipeline, run_setup  # noqa: E402
from pretrain.trainer import Trainer  # noqa: E402
from util import fs  # noqa: E402

RECIPE = {"model_size": "small", "embedding_size": 64, "generator_hidden_size": 0.25,
          "model_hparam_overrides": {"hidden_size": 128, "num_hidden_layers": 2,
                                     "num_attention_heads": 2, "intermediate_size": 512},
          "train_batch_size": 16, "eval_batch_size": 16, "max_seq_length": 128,
          "learning_rate": 1e-3, "num_eval_steps": 4, "num_train_steps": 160}
RUNS = {"corrected": {"adam_bias_correction": True, "lr_decay_after_warmup": True},
        "uniform": {"adam_bias_correction": True, "lr_decay_after_warmup": True,
                    "uniform_generator": True},
        "official": {"adam_bias_correction": False, "lr_decay_after_warmup": False}}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("corpus_file")
    parser.add_argument("vocab_file")
    parser.add_argument("work_dir")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--every", type=int, default=5)
    parser.add_argument("--warmup", type=int, nargs="+", default=[20, 5])
    parser.add_argument("--runs", nargs="+", choices=sorted(RUNS), default=["corrected", "uniform"])
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    corpus = os.path.join(args.work_dir, "corpus")
    tfrecords = os.path.join(args.work_dir, "pretrain_tfrecords")
    if not fs.exists(tfrecords):
        fs.makedirs(corpus)
        fs.copy(args.corpus_file, os.path.join(corpus, os.path.basename(args.corpus_file)))
        assert build_pretraining_dataset.main([
            "--corpus-dir", corpus, "--vocab-file", args.vocab_file, "--output-dir", tfrecords,
            "--max-seq-length", "128", "--num-out-files", "4", "--eval-fraction", "0.1",
            "--no-progress"]) == 0
    print("run | warm-up | step | after warm-up | AUC real | called / replaced | stalled | "
          "constant")
    for name in args.runs:
        for warmup in args.warmup:
            hparams = dict(RECIPE, **RUNS[name], vocab_file=args.vocab_file,
                           num_warmup_steps=warmup, seed=args.seed)
            config = PretrainingConfig.from_hparams(f"{name}_w{warmup}_s{args.seed}",
                                                    args.work_dir, hparams)
            trainer = Trainer(config, run_setup.load_special_ids(config))
            files = input_pipeline.find_files(config.pretrain_tfrecords)
            iterator = trainer.train_iterator(files.train)
            while trainer.global_step < args.steps:
                trainer.train_steps(iterator, args.every)
                m = trainer.evaluate(files.eval, config.num_eval_steps)
                base, called, auc = (m["disc_replaced_rate"], m["disc_positive_rate"],
                                     m["disc_auc_real"])
                near_chance = auc < health.STALL_AUC
                stalled = near_chance and called < health.STALL_POSITIVE_SHARE * base
                constant = near_chance and 1 - called < health.STALL_POSITIVE_SHARE * (1 - base)
                step = trainer.global_step
                print(f"{name} | {warmup} | {step} | {step - warmup} | {auc:.3f} | "
                      f"{called:.4f} / {base:.3f} | {'yes' if stalled else ''} | "
                      f"{'yes' if constant else ''}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
