"""Experiment 1: ELECTRA vs BERT (masked LM) at equal pre-training FLOPs (Table 1, Figure 4).

ELECTRA-tiny trains for S steps; BERT-tiny gets the same FLOPs (more steps, as its step is
cheaper: no generator). Both are compared at two budgets (S/2 and S) against random init.

    python experiments/exp1_electra_vs_bert.py [--steps 600] [--work-dir DIR]
"""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from configure_pretraining import PretrainingConfig  # noqa: E402
from experiments import common  # noqa: E402
from experiments.flops import pretrain_step_flops  # noqa: E402


def step_flops(data: str, overrides: dict) -> int:
    config = PretrainingConfig.from_hparams("flops", data, common.pretrain_hparams(data, overrides))
    return pretrain_step_flops(config)["total"]


def main() -> None:
    args = common.parse_args(__doc__.splitlines()[0])
    start = time.time()
    data = common.ensure_data(args.work_dir)
    electra_flops = step_flops(data, {})
    bert_flops = step_flops(data, {"electra_objective": False})
    rows = [dict(common.evaluate_model(args.work_dir, "random_init", None, random_init=True),
                 steps=0, flops=0)]
    for steps in (args.steps // 2, args.steps):
        budget = steps * electra_flops
        bert_steps = int(round(budget / bert_flops))
        for name, overrides, n, per_step in (
                (f"electra_{steps}", {}, steps, electra_flops),
                (f"bert_{bert_steps}", {"electra_objective": False}, bert_steps, bert_flops)):
            overrides = dict(overrides, num_train_steps=n,
                             num_warmup_steps=min(50, n // 10))
            row = common.evaluate_model(args.work_dir, name, overrides)
            rows.append(dict(row, steps=n, flops=n * per_step))
    for row in rows:
        row["cells"] = {"model": row["name"], "pre-train steps": row["steps"],
                        "pre-train FLOPs": f"{row['flops']:.2e}",
                        **common.standard_cells(row)}
    columns = list(rows[-1]["cells"])
    notes = (f"FLOPs per step (forward + 2x backward, experiments/flops.py): ELECTRA "
             f"{electra_flops:.3e}, BERT {bert_flops:.3e}. Tiny model (hidden 128, 2 layers, "
             f"generator 1/4 width), batch 32, seq 64, SentencePiece vocab {common.VOCAB_SIZE}. "
             f"Wall time {time.time() - start:.0f} s.")
    path = common.write_table(args.out_dir, "exp1_electra_vs_bert",
                              "Experiment 1: ELECTRA vs BERT at equal pre-training FLOPs",
                              rows, columns, notes)
    common.log(f"wrote {path}")


if __name__ == "__main__":
    main()
