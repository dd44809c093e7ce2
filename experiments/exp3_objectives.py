"""Experiment 3: the Table 5 objectives at equal pre-training steps.

ELECTRA, All-Tokens MLM, Replace MLM, ELECTRA 15% and BERT (masked LM), each pre-trained for the
same number of steps with the tiny recipe and fine-tuned on SST-2 and STS-B (median of 3 seeds).
Paper (GLUE, base-size, Table 5): ELECTRA 85.0 > All-Tokens MLM 84.3 > Replace MLM 82.4 >
ELECTRA 15% 82.4 > BERT 82.2. An extra row trains the official release's Electric objective.

    python experiments/exp3_objectives.py [--steps 600] [--work-dir DIR]
"""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from experiments import common  # noqa: E402


def main() -> None:
    args = common.parse_args(__doc__.splitlines()[0])
    start = time.time()
    ref_name, ref = common.electra_reference(args.steps)
    mlm = dict(ref, electra_objective=False)
    models = [("ELECTRA", ref_name, ref),
              ("All-Tokens MLM", f"alltokens_{args.steps}", dict(mlm, all_tokens_mlm=True)),
              ("Replace MLM", f"replacemlm_{args.steps}", dict(mlm, replace_mlm=True)),
              ("ELECTRA 15%", f"electra15_{args.steps}", dict(ref, electra_15=True)),
              ("BERT", f"bert_{args.steps}", mlm),
              # Not in Table 5: the official release's Electric (two-tower cloze generator of
              # the same 1/4 width per tower, noise-contrastive discriminator).
              ("Electric (extra)", f"electric_{args.steps}",
               dict(mlm, electric_objective=True, two_tower_generator=True))]
    rows = common.run_rows(args, models)
    for row in rows:
        row["cells"] = {"objective": row["label"], **common.standard_cells(row)}
    notes = (f"{args.steps} pre-training steps of batch 32, seq 64 for every objective; tiny "
             f"model (hidden 128, 2 layers, generator 1/4 width). MLM acc = the generator's "
             f"(ELECTRA, ELECTRA 15%) or the masked LM's (others) accuracy at the masked "
             f"positions. Wall time {time.time() - start:.0f} s (shared models reused).")
    path = common.write_table(args.out_dir, "exp3_objectives",
                              "Experiment 3: Table 5 objectives", rows,
                              list(rows[0]["cells"]), notes)
    common.log(f"wrote {path}")


if __name__ == "__main__":
    main()
