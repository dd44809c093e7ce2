"""Frozen-feature probes of a model's encoder, beside a randomly initialised encoder of the same shape.

    python tools/probe.py --model-dir DATA/models/NAME
    python tools/probe.py --model-dir DATA/models/NAME --tasks pos chunk --train-size 1000
    python tools/probe.py --model-dir DATA/models/NAME --json probes.json --no-random
    python tools/probe.py --model-dir DATA/models/NAME --random-seeds 3   # 3 random encoders

Linear softmax probes (model/probing.py) on frozen features: POS and chunk tags per word of a
CoNLL-2000 file (--conll, columns word POS chunk; the first --train-size sentences train, the last
--test-size score), and SST-2 sentiment per sentence (--sst, a directory with train.tsv and
dev.tsv; the first --train-size rows train, dev scores). Each on the last layer and on the mean of
all layers. The data defaults to the test data (CONTRIBUTING.md, "Test data") when it is there.

The model dir is a pre-training dir (run_pretraining.py, a Hugging Face import) or a fine-tuning
trial; its `electra/` encoder is probed with its own vocabulary and casing. Exit 2 on bad input,
5 out of memory.
"""
import argparse
import json
import logging
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from util import console  # noqa: E402 -- first: keeps TensorFlow's start-up lines off the console

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.environ.get("ELECTRA_SHARED_DATA", os.path.join(REPO, "..", "shared", "data"))
DEFAULT_CONLL = os.path.join(SHARED, "chunk", "train.txt")
DEFAULT_SST = os.path.join(SHARED, "glue", "SST-2")

log = logging.getLogger("probe")


def build_encoder(md, seed: int, restore: bool):
    """The `electra/` encoder of model dir `md`, restored or freshly initialised with `seed`."""
    from model import embedding_sharing, modeling
    from util import checkpoint

    encoder = modeling.BertModel(md.bert_config, "electra", seed=seed)
    if restore:  # a GDES checkpoint: the discriminator's table is E_G + E_delta
        variables = checkpoint.by_name(encoder.variables)
        md.read_checkpoint(lambda prefix: embedding_sharing.restore(variables, prefix))
    return encoder


def initialise_in_place(encoder, md, seed: int) -> None:
    """Gives `encoder` the weights a fresh encoder of `md` initialised with `seed` has: the
    random encoders are probed through the pre-trained one's traced forward pass instead of
    each tracing its own."""
    from util import checkpoint

    checkpoint.assign_by_name(encoder.variables, build_encoder(md, seed, restore=False).variables)


def probe_model_dir(model_dir: str, tasks: dict, *, random_seeds: int = 1,
                    random_seed: int = 0, max_seq_length: int = 128, updates: int = 1000,
                    num_attention_heads: int | None = None) -> dict:
    """{"pretrained": {probe: accuracy}, "random": {...}, "random_seeds": [...]} for the model in
    `model_dir`; "random" is the mean over `random_seeds` random encoders (seeds random_seed,
    random_seed + 1, ...), each listed in "random_seeds".

    tasks: model.probing.ProbeTask list (probing.load_task).
    """
    from model import model_dir as model_dir_lib
    from model import probing, tokenization

    md = model_dir_lib.read_model_dir(model_dir, num_attention_heads=num_attention_heads)
    if md.vocab_file is None:
        raise ValueError(f"no vocabulary (vocab.txt or spm.model) found for {model_dir}")
    tokenizer = tokenization.build_tokenizer(vocab_file=md.vocab_file,
                                             do_lower_case=md.do_lower_case)
    encoder = build_encoder(md, 0, restore=True)
    extractor = probing.FeatureExtractor(encoder, tokenizer, max_seq_length)

    def run(name: str) -> dict:
        start = time.time()
        result = probing.run_probes(extractor, tasks, updates)
        log.info("%s encoder probed in %.1f s", name, time.time() - start)
        return result

    results = {"pretrained": run("pre-trained"), "checkpoint": md.checkpoint}
    if random_seeds:
        results["random_seeds"] = []
        for seed in range(random_seed, random_seed + random_seeds):
            initialise_in_place(encoder, md, seed)
            results["random_seeds"].append(run(f"random (seed {seed})"))
        results["random"] = {key: sum(r[key] for r in results["random_seeds"]) / random_seeds
                             for key in results["pretrained"]}
    return results


def format_table(results: dict) -> str:
    columns = [c for c in ("pretrained", "random") if c in results]
    names = {"pretrained": "pre-trained", "random": "random"}
    if len(results.get("random_seeds", [])) > 1:
        names["random"] = f"random x{len(results['random_seeds'])}"
    lines = [f"{'probe':<12} " + " ".join(f"{names[c]:>11}" for c in columns)]
    for key in results[columns[0]]:
        lines.append(f"{key:<12} " + " ".join(f"{100 * results[c][key]:>11.1f}" for c in columns))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n")[0], epilog=__doc__.split("\n", 2)[2],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model-dir", required=True, help="model dir to probe")
    parser.add_argument("--tasks", nargs="+", default=["pos", "chunk", "sst"],
                        choices=["pos", "chunk", "sst"], help="probes to run (default: all)")
    parser.add_argument("--conll", default=DEFAULT_CONLL,
                        help="CoNLL-2000 file for pos/chunk (default: the test data's chunk/train.txt)")
    parser.add_argument("--sst", default=DEFAULT_SST,
                        help="SST-2 directory for sst (default: the test data's glue/SST-2)")
    parser.add_argument("--train-size", type=int, default=2000,
                        help="sentences (pos, chunk) or rows (sst) that train a probe (default 2000)")
    parser.add_argument("--test-size", type=int, default=1000,
                        help="held-out CoNLL sentences that score pos/chunk (default 1000)")
    parser.add_argument("--max-seq-length", type=int, default=128,
                        help="pieces per text, [CLS] and [SEP] included (default 128)")
    parser.add_argument("--updates", type=int, default=1000,
                        help="minibatch Adam updates per probe (default 1000)")
    parser.add_argument("--random-seed", type=int, default=0,
                        help="seed of the (first) randomly initialised encoder (default 0)")
    parser.add_argument("--random-seeds", type=int, default=1,
                        help="random encoders (seeds --random-seed, +1, ...); the table shows their "
                             "mean, the JSON each (default 1)")
    parser.add_argument("--no-random", action="store_true",
                        help="skip the randomly initialised encoder")
    parser.add_argument("--json", help="also write the results to this JSON file")
    parser.add_argument("--num-attention-heads", type=int, metavar="N",
                        help="attention heads of a model dir without bert_config.json or "
                             "pretrain_config.json (an official release: small 4, base 12, large "
                             "16); no checkpoint shape shows them")
    console.add_verbose_flag(parser)
    args = parser.parse_args(argv)
    console.setup(args.verbose, logging.INFO, "%(levelname)s %(message)s")
    if args.random_seeds < 1:
        parser.error(f"--random-seeds must be >= 1, got {args.random_seeds}")
    for flag in ("train_size", "test_size", "updates"):
        if getattr(args, flag) < 1:
            parser.error(f"--{flag.replace('_', '-')} must be >= 1, got {getattr(args, flag)}")
    if args.max_seq_length < 3:
        parser.error(f"--max-seq-length must be >= 3 ([CLS] word [SEP]), got {args.max_seq_length}")
    from model import probing
    from util import io_utils, out_of_memory, write_errors

    try:
        # Refused now, not after the probes have run: --json where nothing can be written.
        write_errors.check_writable("--json", args.json)
        paths = {"pos": args.conll, "chunk": args.conll, "sst": args.sst}
        tasks = [probing.load_task(name, paths[name], args.train_size, args.test_size)
                 for name in args.tasks]
        results = probe_model_dir(args.model_dir, tasks,
                                  random_seeds=0 if args.no_random else args.random_seeds,
                                  random_seed=args.random_seed,
                                  max_seq_length=args.max_seq_length, updates=args.updates,
                                  num_attention_heads=args.num_attention_heads)
    except (ValueError, OSError) as e:
        log.error("%s", e)
        return 2
    except out_of_memory.ERRORS as e:  # the features of every probe sentence are held at once
        log.error("%s", out_of_memory.message(
            e, f"--train-size {args.train_size}, --test-size {args.test_size} and "
            f"--max-seq-length {args.max_seq_length}",
            "lower --train-size, --test-size or --max-seq-length"))
        return out_of_memory.EXIT_OUT_OF_MEMORY
    print(format_table(results))
    if args.json:
        try:
            io_utils.write_json(args.json, dict(results, tasks=args.tasks,
                                                train_size=args.train_size,
                                                test_size=args.test_size))
        except OSError as e:  # a disk that filled up meanwhile: said of --json
            log.error("%s", write_errors.error_for(e, args.json, "--json"))
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
