"""Experiment 2: generator size sweep including the unigram generator (Figure 3, left).

The tiny discriminator (hidden 128) with generators of 1/4, 1/2 and 1x its width (tied
embeddings), and a unigram generator (frequencies counted on the training tfrecords), all at the
same number of pre-training steps; fine-tuned on SST-2 and STS-B (median of 3 seeds).

    python experiments/exp2_generator_size.py [--steps 600] [--work-dir DIR]
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from experiments import common  # noqa: E402


def models(args) -> list[tuple[str, str, dict]]:
    ref_name, ref = common.electra_reference(args.steps)
    return [("unigram generator", f"unigram_{args.steps}", dict(ref, unigram_generator=True)),
            ("generator 1/4 (hidden 32)", ref_name, ref),
            ("generator 1/2 (hidden 64)", f"gen050_{args.steps}",
             dict(ref, generator_hidden_size=0.5)),
            ("generator 1x (hidden 128)", f"gen100_{args.steps}",
             dict(ref, generator_hidden_size=1.0))]


NOTES = ("Discriminator hidden 128, 2 layers; {steps} pre-training steps of batch 32, seq 64; "
         "MLM acc = the generator's masked-LM accuracy on held-out data (the unigram "
         "generator's is its most frequent token). Wall time {seconds:.0f} s (models shared "
         "with other experiments are reused).")


def main() -> None:
    common.run_experiment(__doc__, "exp2_generator_size",
                          "Experiment 2: generator size (Figure 3 left)", "generator",
                          models, NOTES)


if __name__ == "__main__":
    main()
