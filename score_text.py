"""Scores text with a pre-trained ELECTRA discriminator: how likely each token is a replacement.

    python score_text.py --model-dir DATA/models/small "the chef cooked the meal"
    python score_text.py --model-dir DATA/models/small "the chef ate the meal" "a second text"
    # let the generator replace ~15% of the tokens first, as in pre-training
    python score_text.py --model-dir DATA/models/small --corrupt --seed 3 "the chef cooked the meal"
    # machine-readable, one JSON object per text (for comparison with other implementations)
    python score_text.py --model-dir DATA/models/small --json "the chef cooked the meal"
    python score_text.py --model-dir DATA/models/small --json --corrupt --generator "some text"
    # [MASK] in the text is kept as the mask token; --generator reports its predictions there
    python score_text.py --model-dir DATA/models/small --generator "the chef [MASK] the meal"

The architecture comes from the model dir (bert_config.json and generator_config.json, else
pretrain_config.json; for an official release dir the checkpoint's shapes and the heads you state
with --num-attention-heads and --generator-num-attention-heads), the vocabulary from its
vocab.txt (--vocab-file overrides), the weights from its newest checkpoint (--checkpoint
overrides). Text is lower-cased as in pre-training (pretrain_config.json do_lower_case; --cased /
--uncased override).

--json prints {"tokens", "input_ids", "disc_logits", "replaced_prob"}; with --corrupt also
"original_tokens", "original_ids", "replaced" (1 where the generator changed the token); with
--generator "masked_positions" and "generator_logits" (one vocabulary-sized row per position).
Exit status: 0 done, 2 bad input, 5 out of memory (all texts are scored as one batch).
"""
import argparse
import json
import logging
import re
import sys

from util import console  # first: keeps TensorFlow's start-up lines off the console

import numpy as np

from model import model_dir as model_dir_lib
from model import tokenization
from pretrain import masking
from pretrain import scoring
from util import out_of_memory

log = logging.getLogger("score_text")

MASK_TOKEN = "[MASK]"


def encode(tokenizer, text: str, max_length: int) -> list[int]:
    """[CLS] tokens [SEP], truncated to `max_length`; a literal [MASK] stays the mask token."""
    ids = [tokenizer.cls_id]
    for i, piece in enumerate(re.split(re.escape(MASK_TOKEN), text)):
        if i:
            ids.append(tokenizer.mask_id)
        ids += tokenizer.encode(piece)
    ids = ids[:max_length - 1]
    return ids + [tokenizer.sep_id]


def build_scorer(md: model_dir_lib.ModelDir, need_generator: bool) -> scoring.ReplacedTokenScorer:
    """The discriminator (and generator) of `md`, weights restored."""
    from model import embedding_sharing
    from util import checkpoint

    names = set(md.read_checkpoint(lambda p: checkpoint.load(p).get_variable_to_shape_map()))
    if "discriminator_predictions/dense_1/kernel" not in names:
        raise ValueError(f"{md.checkpoint} has no discriminator head (discriminator_predictions/); "
                         "score_text needs a pre-trained ELECTRA discriminator")
    gen_config = gen_scope = gen_emb = None
    if need_generator:
        if md.generator_unknown:  # a generator whose heads no file states
            raise ValueError(f"{md.generator_unknown} (--corrupt and --generator need it)")
        if md.generator_config is None or "generator_predictions/output_bias" not in names:
            raise ValueError(f"{md.checkpoint} has no generator (generator_predictions/); "
                             "--corrupt and --generator need one")
        gen_config = md.generator_config
        gen_scope = "generator" if any(n.startswith("generator/encoder/") for n in names) \
            else "electra"
        gen_emb = gen_scope if f"{gen_scope}/embeddings/word_embeddings" in names else "electra"
    scorer = scoring.ReplacedTokenScorer(md.bert_config, gen_config, gen_scope or "generator",
                                         gen_emb or "electra",
                                         gdes=embedding_sharing.DELTA in names)
    md.read_checkpoint(scorer.restore)
    return scorer


MIN_SEQ_LENGTH = 3


def score(md: model_dir_lib.ModelDir, texts: list[str], *, corrupt: bool = False,
          generator: bool = False, seed: int = 0, mask_prob: float | None = None,
          do_lower_case: bool | None = None, max_seq_length: int | None = None) -> list[dict]:
    """One result dict per text (the --json objects)."""
    if md.vocab_file is None:
        raise ValueError(f"no vocab.txt in {md.path}; pass --vocab-file")
    lower = md.do_lower_case if do_lower_case is None else do_lower_case
    tokenizer = tokenization.build_tokenizer(vocab_file=md.vocab_file, do_lower_case=lower)
    settings = md.settings
    mask_prob = float(settings.get("mask_prob", 0.15)) if mask_prob is None else mask_prob
    max_len = max_seq_length or int(settings.get("max_seq_length",
                                                 md.bert_config.max_position_embeddings))
    max_len = min(max_len, md.bert_config.max_position_embeddings)
    sequences = [encode(tokenizer, t, max_len) for t in texts]
    scorer = build_scorer(md, corrupt or generator)
    ids, mask = scoring.pad_batch(sequences, tokenizer.pad_id)
    segments = np.zeros_like(ids)
    original = ids
    replaced = positions = weights = gen_logits = None
    if corrupt:
        special = masking.SpecialIds(tokenizer.pad_id, tokenizer.cls_id, tokenizer.sep_id,
                                     tokenizer.mask_id)
        c = scorer.corrupt(ids, mask, segments, special_ids=special, mask_prob=mask_prob,
                           seed=seed, temperature=float(settings.get("temperature", 1.0)),
                           disallow_correct=bool(settings.get("disallow_correct", False)))
        ids, replaced = c.fake_ids.numpy(), c.replaced.numpy()
        positions, weights, gen_logits = (c.positions.numpy(), c.weights.numpy(),
                                          c.generator_logits.numpy())
    elif generator:
        n = max(1, int((ids == tokenizer.mask_id).sum(axis=1).max()))
        positions = np.zeros([len(texts), n], np.int32)
        weights = np.zeros([len(texts), n], np.float32)
        for i, row in enumerate(ids):
            found = np.flatnonzero(row == tokenizer.mask_id)
            positions[i, :len(found)], weights[i, :len(found)] = found, 1.0
        if not weights.any():
            raise ValueError("--generator without --corrupt reports the generator's predictions "
                             f"at {MASK_TOKEN} tokens, and the text has none")
        gen_logits = scorer.generator_logits(ids, mask, segments, positions).numpy()
    logits = scorer.discriminate(ids, mask, segments).numpy()
    results = []
    for i, seq in enumerate(sequences):
        n = len(seq)
        row_ids = [int(x) for x in ids[i, :n]]
        result = {"tokens": tokenizer.convert_ids_to_tokens(row_ids), "input_ids": row_ids,
                  "disc_logits": [float(x) for x in logits[i, :n]],
                  "replaced_prob": [float(x) for x in 1.0 / (1.0 + np.exp(-logits[i, :n]))]}
        if corrupt:
            result["original_ids"] = [int(x) for x in original[i, :n]]
            result["original_tokens"] = tokenizer.convert_ids_to_tokens(result["original_ids"])
            result["replaced"] = [int(x) for x in replaced[i, :n]]
        if generator:
            keep = weights[i] > 0
            result["masked_positions"] = [int(p) for p in positions[i][keep]]
            result["generator_logits"] = gen_logits[i][keep].tolist()
        results.append(result)
    return results


def format_table(result: dict) -> str:
    lines = []
    corrupt = "replaced" in result
    header = f"{'token':<20} {'p(replaced)':>11}"
    lines.append(header + ("  generator" if corrupt else ""))
    for j, (token, p) in enumerate(zip(result["tokens"], result["replaced_prob"])):
        line = f"{token:<20} {p:>11.3f}"
        if corrupt and result["replaced"][j]:
            line += f"  * was {result['original_tokens'][j]!r}"
        lines.append(line)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n")[0], epilog=__doc__.split("\n", 2)[2],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("texts", nargs="+", metavar="TEXT", help="text(s) to score")
    parser.add_argument("--model-dir", required=True, help="pre-trained model dir")
    parser.add_argument("--checkpoint", help="checkpoint prefix (default: newest in --model-dir)")
    parser.add_argument("--vocab-file", help="vocabulary (default: <model-dir>/vocab.txt)")
    model_dir_lib.add_heads_flags(parser)
    parser.add_argument("--corrupt", action="store_true",
                        help="let the generator replace ~mask_prob of the tokens first")
    parser.add_argument("--generator", action="store_true",
                        help="also report generator logits at the masked positions")
    parser.add_argument("--json", action="store_true", help="one JSON object per text")
    parser.add_argument("--seed", type=int, default=0, help="seed of masking and sampling")
    parser.add_argument("--mask-prob", type=float, help="default: the model's mask_prob (0.15)")
    parser.add_argument("--max-seq-length", type=int,
                        help="truncate to this many tokens (default: the model's max_seq_length)")
    case = parser.add_mutually_exclusive_group()
    case.add_argument("--uncased", dest="do_lower_case", action="store_true", default=None,
                      help="lower-case the text")
    case.add_argument("--cased", dest="do_lower_case", action="store_false",
                      help="keep the case of the text")
    console.add_verbose_flag(parser)
    args = parser.parse_args(argv)
    console.setup(args.verbose, logging.WARNING, "%(levelname)s %(message)s")
    try:
        if args.mask_prob is not None and not 0.0 < args.mask_prob < 1.0:
            raise ValueError(f"--mask-prob must be in (0, 1), got {args.mask_prob}")
        # [CLS] + one token + [SEP]; 0 used to mean the default, below 3 left no text to score.
        if args.max_seq_length is not None and args.max_seq_length < MIN_SEQ_LENGTH:
            raise ValueError(f"--max-seq-length must be at least {MIN_SEQ_LENGTH} ([CLS], a "
                             f"token, [SEP]), got {args.max_seq_length}")
        md = model_dir_lib.read_model_dir(args.model_dir, args.checkpoint, args.vocab_file,
                                          args.num_attention_heads,
                                          args.generator_num_attention_heads)
        positions = md.bert_config.max_position_embeddings
        if args.max_seq_length is not None and args.max_seq_length > positions:
            raise ValueError(f"--max-seq-length {args.max_seq_length} exceeds the model's "
                             f"max_position_embeddings ({positions}, {md.path})")
        results = score(md, args.texts, corrupt=args.corrupt, generator=args.generator,
                        seed=args.seed, mask_prob=args.mask_prob,
                        do_lower_case=args.do_lower_case, max_seq_length=args.max_seq_length)
    except (ValueError, OSError) as e:
        log.error("%s", e)
        return 2
    except out_of_memory.ERRORS as e:  # the texts are scored as one batch
        length = args.max_seq_length or "the model's max_seq_length"
        log.error("%s", out_of_memory.message(
            e, f"{len(args.texts)} text(s) in one batch of up to {length} tokens",
            "score fewer texts per call, or pass a smaller --max-seq-length"))
        return out_of_memory.EXIT_OUT_OF_MEMORY
    for text, result in zip(args.texts, results):
        if args.json:
            print(json.dumps(result))
        else:
            print(f"# {text}\n{format_table(result)}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
