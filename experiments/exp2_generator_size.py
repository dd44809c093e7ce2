"""Experiment 2: generator size sweep including the unigram generator (Figure 3, left).

The tiny discriminator (hidden 128) with generators of 1/4, 1/2 and 1x its width (tied
embeddings), and a unigram generator (frequencies counted on the training tfrecords), all at the
same number of pre-training steps; fine-tuned on SST-2 and STS-B (median of 3 seeds).

    python experiments/exp2_generator_size.py [--steps 600] [--work-dir DIR]
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
    models = [("unigram generator", f"unigram_{args.steps}", dict(ref, unigram_generator=True)),
              ("generator 1/4 (hidden 32)", ref_name, ref),
              ("generator 1/2 (hidden 64)", f"gen050_{args.steps}",
               dict(ref, generator_hidden_size=0.5)),
              ("generator 1x (hidden 128)", f"gen100_{args.steps}",
               dict(ref, generator_hidden_size=1.0))]
    rows = common.run_rows(args, models)
    for row in rows:
        row["cells"] = {"generator": row["label"], **common.standard_cells(row)}
    notes = (f"Discriminator hidden 128, 2 layers; {args.steps} pre-training steps of batch 32, "
             f"seq 64; MLM acc = the generator's masked-LM accuracy on held-out data (the "
             f"unigram generator's is its most frequent token). Wall time "
             f"{time.time() - start:.0f} s (models shared with other experiments are reused).")
    path = common.write_table(args.out_dir, "exp2_generator_size",
                              "Experiment 2: generator size (Figure 3 left)", rows,
                              list(rows[0]["cells"]), notes)
    common.log(f"wrote {path}")


if __name__ == "__main__":
    main()
