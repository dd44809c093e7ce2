"""Two-stage training (Section 3.2 of the paper), between the stages.

Stage 1 trains a masked LM (electra_objective false) of the discriminator's size. This tool
writes a checkpoint whose discriminator (`electra/`) and generator (`generator/`) are both that
masked LM; stage 2 starts from it with the generator frozen:

    python run_pretraining.py --data-dir DATA --model-name stage1 \
        --hparams '{"electra_objective": false, ...}'
    python tools/two_stage_init.py DATA/models/stage1 DATA/stage2_init/model.ckpt-0
    python run_pretraining.py --data-dir DATA --model-name stage2 --hparams '{"freeze_generator":
        true, "generator_hidden_size": 1.0, "init_checkpoint": "DATA/stage2_init/model.ckpt-0", ...}'

In stage 2 the generator has its own copy of the token embeddings (`generator/embeddings`), so
all of it stays exactly the stage-1 masked LM while the discriminator trains.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from util import checkpoint, fs  # noqa: E402


def make_two_stage_init(stage1_checkpoint: str, output_prefix: str) -> list[str]:
    """Two-stage training, stage 2: a checkpoint whose discriminator AND generator are the
    stage-1 masked LM (same size): `electra/*` stays, `generator/*` gets copies of every
    `electra/` weight (embeddings included: the frozen generator has its own copy), the
    generator_predictions head stays. Returns the written variable names."""
    fs.check_spellings({"stage1": stage1_checkpoint, "output_prefix": output_prefix})
    source = checkpoint.resolve(stage1_checkpoint)
    if fs.same_place(output_prefix, source):
        raise ValueError(f"output_prefix {output_prefix} is the stage-1 checkpoint {source}: "
                         "writing it would replace the input; choose another prefix")
    # Stage 1 may still be training: a save may prune `source` before it is read.
    directory = stage1_checkpoint if fs.isdir(stage1_checkpoint) else None
    source, values = checkpoint.read_newest(source, directory, checkpoint.read_all)
    out = {}
    for name, value in values.items():
        if name.startswith(("electra/", "generator_predictions/")):
            out[name] = value
            if name.startswith("electra/"):
                out["generator/" + name[len("electra/"):]] = value
    if not any(n.startswith("generator_predictions/") for n in out):
        raise ValueError(f"{stage1_checkpoint} has no generator_predictions/ head: is it a "
                         "masked-LM (electra_objective false) checkpoint?")
    checkpoint.save_tensors(output_prefix, out)
    return sorted(out)



def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("stage1", help="stage-1 model dir or checkpoint prefix")
    parser.add_argument("output_prefix", help="checkpoint prefix to write, e.g. DIR/model.ckpt-0")
    args = parser.parse_args()
    try:
        names = make_two_stage_init(args.stage1, args.output_prefix)
    except (ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {len(names)} variables to {args.output_prefix}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
