"""Experiment 4 (extra): training algorithms (Figure 3, right) at equal pre-training steps.

Joint ELECTRA, adversarial ELECTRA (REINFORCE, Appendix F) and two-stage ELECTRA (masked LM for
S/2 steps, then a discriminator initialised from it for S/2 steps with the generator frozen), all
with a generator of the discriminator's size, and BERT; fine-tuned on SST-2 and STS-B.

    python experiments/exp4_training_algorithms.py [--steps 600] [--work-dir DIR]
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from experiments import common  # noqa: E402
from tools.two_stage_init import make_two_stage_init  # noqa: E402


def models(args) -> list[tuple[str, str, dict]]:
    """The four models; first pre-trains two-stage's stage 1 (masked LM) and its stage-2 init."""
    steps, half = args.steps, args.steps // 2
    _, ref = common.electra_reference(steps)
    data = common.ensure_data(args.work_dir)
    stage1_name = f"mlm_{half}"
    stage1 = {"electra_objective": False, "num_train_steps": half,
              "num_warmup_steps": min(50, half // 10)}
    common.pretrain(args.work_dir, stage1_name, stage1)
    init = os.path.join(data, "two_stage_init", f"{stage1_name}", "model.ckpt-0")
    if not os.path.exists(init + ".index"):
        make_two_stage_init(os.path.join(data, "models", stage1_name), init)
    stage2 = dict(stage1, electra_objective=True, freeze_generator=True,
                  generator_hidden_size=1.0, init_checkpoint=init)
    return [("ELECTRA (joint, generator 1x)", f"gen100_{steps}",
             dict(ref, generator_hidden_size=1.0)),
            ("Adversarial ELECTRA (generator 1x)", f"adversarial_{steps}",
             dict(ref, generator_hidden_size=1.0, adversarial_generator=True)),
            (f"Two-stage ELECTRA ({half} MLM + {half} frozen-generator steps)",
             f"twostage_{half}_{half}", stage2),
            ("BERT", f"bert_{steps}", dict(ref, electra_objective=False))]


def run(args, models: list[tuple[str, str, dict]]) -> list[dict]:
    # Own models first; the shared ones (exp2's gen100, exp3's BERT) may be in training by
    # another experiment: wait for their results rather than train them twice.
    own = common.run_rows(args, models[1:3])
    for _, name, _ in (models[0], models[3]):
        common.wait_for_results(args.work_dir, name)
    return [common.run_rows(args, models[:1])[0]] + own + [common.run_rows(args, models[3:])[0]]


NOTES = ("{steps} pre-training steps in total for each (two-stage: {half} + {half}); batch 32, "
         "seq 64, tiny model. Wall time {seconds:.0f} s (shared models reused).")


def main() -> None:
    common.run_experiment(__doc__, "exp4_training_algorithms",
                          "Experiment 4: training algorithms (Figure 3 right)",
                          "training algorithm", models, NOTES, run=run)


if __name__ == "__main__":
    main()
