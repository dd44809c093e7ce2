"""ELECTRA as a masked language model (Appendix G of the paper).

Restores a pre-trained model dir (generator + discriminator), masks held-out batches as in
pre-training eval, and reports the generator's masked-LM accuracy next to ELECTRA's: the best of
the generator's top-k candidates under D pG / (a (1 - D) + pG), a = (1 - mask_prob) / mask_prob.

    python tools/electra_as_mlm.py --model-dir DATA/models/NAME [--batches 2] [--top-k 100]
        [--output results.json]
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import tensorflow as tf  # noqa: E402

from configure_pretraining import PretrainingConfig  # noqa: E402
from pretrain import input_pipeline, masking  # noqa: E402
from pretrain import rng as rng_lib  # noqa: E402
from pretrain.masking import SpecialIds  # noqa: E402
from pretrain.objectives import functions  # noqa: E402
from pretrain.pretraining_model import PretrainingModel  # noqa: E402
from model import tokenization  # noqa: E402
from util import checkpoint, fs, io_utils  # noqa: E402


def electra_as_mlm(model, masked: masking.MaskedInputs, top_k: int = 100,
                   chunk: int = 10) -> dict:
    """Appendix G on one batch: the generator's and ELECTRA's masked-LM predictions.

    model: a PretrainingModel with a learned generator and a discriminator; masked: the eval
    masking. For each of the generator's top-k candidates (rank r), every masked position gets
    its rank-r candidate and the discriminator scores it -- the paper's simplifying assumption
    (Appendix F) that D's output at t depends only on x_t and the unmasked tokens. ELECTRA's
    prediction is the candidate with the best Appendix-G score. Returns float sums:
    weight, generator_correct, electra_correct, in_top_k (original among the candidates).
    """
    logits = model.generator(masked, training=False).logits
    log_probs = tf.nn.log_softmax(logits)
    top_log_probs, candidates = tf.math.top_k(log_probs, k=top_k)  # [B, N, K]
    original = masking.unmask(masked)
    positions = masked.masked_lm_positions
    real_probs = []
    for start in range(0, top_k, chunk):
        ranks = list(range(start, min(top_k, start + chunk)))
        fakes = tf.concat([masking.scatter_update(original, candidates[:, :, r], positions)[0]
                           for r in ranks], 0)  # [len(ranks) * B, L]
        times = len(ranks)
        encoded = model.discriminator_encoder(fakes, tf.tile(masked.input_mask, [times, 1]),
                                              tf.tile(masked.segment_ids, [times, 1]),
                                              training=False)
        replaced_logits = model.objective.head(encoded.sequence_output)
        at_positions = masking.gather_positions(replaced_logits,
                                                tf.tile(positions, [times, 1]))
        for part in tf.split(at_positions, times, 0):
            real_probs.append(tf.sigmoid(-part))  # P(original) = 1 - P(replaced)
    real_probs = tf.stack(real_probs, -1)  # [B, N, K]
    scores = functions.electra_mlm_scores(top_log_probs, real_probs, model.config.mask_prob)
    electra_pred = tf.gather(candidates, tf.argmax(scores, -1, output_type=tf.int32),
                             batch_dims=2)
    gen_pred = candidates[:, :, 0]
    w = masked.masked_lm_weights
    ids = masked.masked_lm_ids

    def hits(pred):
        return float(tf.reduce_sum(w * tf.cast(tf.equal(pred, ids), tf.float32)))

    in_top = tf.reduce_any(tf.equal(candidates, ids[..., tf.newaxis]), -1)
    return {"weight": float(tf.reduce_sum(w)), "generator_correct": hits(gen_pred),
            "electra_correct": hits(electra_pred),
            "in_top_k": float(tf.reduce_sum(w * tf.cast(in_top, tf.float32)))}


def evaluate(model_dir: str, batches: int, top_k: int, batch_size: int = 64) -> dict:
    """Appendix-G accuracies of the newest checkpoint in `model_dir` over held-out batches."""
    saved = io_utils.read_json(os.path.join(model_dir, "pretrain_config.json"))
    config = PretrainingConfig.from_hparams(saved["model_name"], saved["data_dir"], {
        k: v for k, v in saved.items() if k not in ("model_name", "data_dir")})
    if not (config.electra_objective and config.untied_generator) or \
            config.uniform_generator or config.unigram_generator or config.two_tower_generator:
        raise ValueError(f"{model_dir}: Appendix G needs an ELECTRA model with a learned "
                         "masked-LM generator")
    special_ids = SpecialIds.from_vocab(tokenization.load_vocab(config.vocab_file))
    model = PretrainingModel(config, special_ids)
    report = checkpoint.restore(model.model_variables(), model_dir)
    files = input_pipeline.find_files(config.pretrain_tfrecords, config.eval_tfrecords)
    dataset = input_pipeline.eval_dataset(files.eval, global_batch_size=batch_size,
                                          max_seq_length=config.max_seq_length,
                                          num_batches=batches)
    totals: dict = {}
    for i, features in enumerate(dataset):
        rng = rng_lib.ExampleRng(config.seed, tf.constant(-1 - i, tf.int64), 0)
        masked = model.mask({k: features[k] for k in ("input_ids", "input_mask",
                                                      "segment_ids")}, rng)
        for key, value in electra_as_mlm(model, masked, top_k).items():
            totals[key] = totals.get(key, 0.0) + value
    w = max(totals["weight"], 1e-9)
    return {"checkpoint": report.path, "masked_tokens": int(totals["weight"]), "top_k": top_k,
            "generator_accuracy": totals["generator_correct"] / w,
            "electra_accuracy": totals["electra_correct"] / w,
            "original_in_top_k": totals["in_top_k"] / w}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", required=True)
    parser.add_argument("--batches", type=int, default=2)
    parser.add_argument("--top-k", type=int, default=100)
    parser.add_argument("--output", default=None, help="also write the results here (JSON)")
    args = parser.parse_args()
    try:
        fs.check_spellings({"--model-dir": args.model_dir, "--output": args.output})
        results = evaluate(args.model_dir, args.batches, args.top_k)
    except (ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(results, indent=2))
    if args.output:
        io_utils.write_json(args.output, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
