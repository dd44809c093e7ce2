"""Experiment 3: the Table 5 objectives at equal pre-training steps.

ELECTRA, All-Tokens MLM, Replace MLM, ELECTRA 15% and BERT (masked LM), each pre-trained for the
same number of steps with the tiny recipe and fine-tuned on SST-2 and STS-B (median of 3 seeds).
Paper (GLUE, base-size, Table 5): ELECTRA 85.0 > All-Tokens MLM 84.3 > Replace MLM 82.4 >
ELECTRA 15% 82.4 > BERT 82.2. An extra row trains the official release's Electric objective.

    python experiments/exp3_objectives.py [--steps 600] [--work-dir DIR]
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from experiments import common  # noqa: E402


def models(args) -> list[tuple[str, str, dict]]:
    ref_name, ref = common.electra_reference(args.steps)
    mlm = dict(ref, electra_objective=False)
    return [("ELECTRA", ref_name, ref),
            ("All-Tokens MLM", f"alltokens_{args.steps}", dict(mlm, all_tokens_mlm=True)),
            ("Replace MLM", f"replacemlm_{args.steps}", dict(mlm, replace_mlm=True)),
            ("ELECTRA 15%", f"electra15_{args.steps}", dict(ref, electra_15=True)),
            ("BERT", f"bert_{args.steps}", mlm),
            # Not in Table 5: the official release's Electric (two-tower cloze generator of
            # the same 1/4 width per tower, noise-contrastive discriminator).
            ("Electric (extra)", f"electric_{args.steps}",
             dict(mlm, electric_objective=True, two_tower_generator=True))]


NOTES = ("{steps} pre-training steps of batch 32, seq 64 for every objective; tiny model "
         "(hidden 128, 2 layers, generator 1/4 width). MLM acc = the generator's (ELECTRA, "
         "ELECTRA 15%) or the masked LM's (others) accuracy at the masked positions. Wall time "
         "{seconds:.0f} s (shared models reused).")


def main() -> None:
    common.run_experiment(__doc__, "exp3_objectives", "Experiment 3: Table 5 objectives",
                          "objective", models, NOTES)


if __name__ == "__main__":
    main()
