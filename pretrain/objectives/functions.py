"""The math of the paper's alternative objectives (Sections 3.2-3.5, Appendices F and G) and of
the official release's Electric objective: plain functions of tensors, used by the objective
pieces of this package, the generators and tools/electra_as_mlm.py.

- unigram generator: token frequencies counted on the training tfrecords, as logits;
- All-Tokens MLM: the copy mechanism's likelihood and predictions (Section 3.5);
- adversarial generator: REINFORCE with a learned baseline (Appendix F);
- Electric: the noise-contrastive logit;
- ELECTRA as a masked LM (Appendix G): the candidates' scores.
"""
import numpy as np
import tensorflow as tf

from pretrain import masking
from util import tf_data

# Logit of tokens the unigram generator never samples (special tokens): finite, so losses stay
# finite, yet far below any real token.
_NEVER = -1e4


# -- unigram generator ------------------------------------------------------------------------

def count_unigrams(files: list[str], vocab_size: int, max_seq_length: int,
                   max_examples: int = 0) -> np.ndarray:
    """int64 [V]: how often each id occurs among the real tokens (input_mask 1) of `files`.

    files: pre-training tfrecords (the schema of pretrain/pretrain_data.py); max_examples > 0
    stops after that many examples (the first ones, in file order).
    """
    from pretrain import pretrain_data  # local: keeps this module light for the model

    if not files:
        raise ValueError("unigram_generator: no training tfrecords to count token frequencies on")
    dataset = tf_data.records(sorted(files))
    if max_examples > 0:
        dataset = dataset.take(max_examples)
    dataset = dataset.batch(1024).map(
        lambda s: pretrain_data.parse_pretrain_examples(s, max_seq_length))
    counts = np.zeros([vocab_size], np.int64)
    for batch in dataset:
        ids = batch["input_ids"].numpy()[batch["input_mask"].numpy() > 0]
        if ids.size and (ids.min() < 0 or ids.max() >= vocab_size):
            raise ValueError(f"unigram_generator: token id {int(ids.max())} in {files[0]}... "
                             f"is outside the vocabulary of {vocab_size}")
        counts += np.bincount(ids, minlength=vocab_size).astype(np.int64)
    return counts


def unigram_logits(counts: np.ndarray, special_ids: masking.SpecialIds) -> np.ndarray:
    """float32 [V] log-probabilities of the unigram generator.

    Add-0.5 smoothing keeps every ordinary token possible (the masked-LM loss of a token never
    seen in the counted data stays finite); [PAD], [CLS], [SEP] and [MASK] are never sampled.
    """
    smoothed = counts.astype(np.float64) + 0.5
    never = list(special_ids)
    smoothed[never] = 0.0
    logits = np.full(counts.shape, _NEVER, np.float64)
    keep = smoothed > 0
    logits[keep] = np.log(smoothed[keep] / smoothed[keep].sum())
    return logits.astype(np.float32)


# -- copy mechanism (All-Tokens MLM) ------------------------------------------------------------

def copy_mechanism_nll(mlm_logits: tf.Tensor, copy_logits: tf.Tensor, input_ids: tf.Tensor,
                       target_ids: tf.Tensor) -> tf.Tensor:
    """-log p(target) with p(x) = D * [x == input] + (1 - D) * softmax(mlm_logits)(x).

    mlm_logits float32 [B, L, V]; copy_logits float32 [B, L] (D = sigmoid, the copy
    probability); input_ids, target_ids int32 [B, L] -> float32 [B, L]. Computed in log space.
    """
    log_p = tf.gather(tf.nn.log_softmax(mlm_logits), target_ids, batch_dims=2)
    log_copy = tf.math.log_sigmoid(copy_logits)
    log_generate = tf.math.log_sigmoid(-copy_logits) + log_p
    same = tf.equal(input_ids, target_ids)
    both = tf.reduce_logsumexp(tf.stack([log_copy, log_generate], -1), -1)
    return -tf.where(same, both, log_generate)


def copy_mechanism_predictions(mlm_logits: tf.Tensor, copy_logits: tf.Tensor,
                               input_ids: tf.Tensor) -> tf.Tensor:
    """int32 [B, L]: argmax of the copy-mechanism distribution."""
    probs = tf.nn.softmax(mlm_logits) * tf.sigmoid(-copy_logits)[..., tf.newaxis]
    probs += tf.one_hot(input_ids, tf.shape(mlm_logits)[-1]) * tf.sigmoid(copy_logits)[
        ..., tf.newaxis]
    return tf.argmax(probs, -1, output_type=tf.int32)


# -- adversarial generator (Appendix F) --------------------------------------------------------

def reinforce_losses(sample_log_probs: tf.Tensor, rewards: tf.Tensor, baseline_logits: tf.Tensor,
                     weights: tf.Tensor, denominator: tf.Tensor):
    """REINFORCE for a generator maximising the discriminator's loss, with a learned baseline.

    sample_log_probs: float32 [B, N] log pG(sampled token) (differentiable);
    rewards: [B, N] R = the discriminator's loss on the sampled token (-log D(correct label));
    baseline_logits: [B, N] z with b = -log sigmoid(z) (Appendix F);
    weights [B, N]; denominator: scalar. Returns (policy_loss, baseline_loss):
    minimising policy_loss = -sum w * log pG * (R - b) / denom ascends E[R];
    baseline_loss = cross-entropy of sigmoid(z) against exp(-R), so b is trained towards R.
    """
    rewards = tf.stop_gradient(rewards)
    baseline = -tf.math.log_sigmoid(baseline_logits)
    advantage = tf.stop_gradient(rewards - baseline)
    policy = -tf.reduce_sum(weights * sample_log_probs * advantage) / (denominator + 1e-6)
    target = tf.exp(-rewards)  # the probability D gave the correct label
    baseline_loss = tf.reduce_sum(weights * tf.nn.sigmoid_cross_entropy_with_logits(
        labels=target, logits=baseline_logits)) / (denominator + 1e-6)
    return policy, baseline_loss


# -- Electric ----------------------------------------------------------------------------------

def electric_logits(disc_logits: tf.Tensor, cloze_log_probs: tf.Tensor, input_ids: tf.Tensor,
                    mask_prob: float) -> tf.Tensor:
    """Electric's noise-contrastive logit of "this token is noise", as the official release.

    disc_logits [B, L]; cloze_log_probs float32 [B, L, V] (the two-tower model's log q(. | rest));
    input_ids int32 [B, L] (the tokens the discriminator reads). Adds stop_gradient(log q(x_t))
    and log(k / (1 - k)) with k = mask_prob, so sigmoid(logit) = k q / (k q + (1 - k) E).
    """
    log_q = tf.stop_gradient(tf.gather(cloze_log_probs, input_ids, batch_dims=2))
    return disc_logits + log_q + float(np.log(mask_prob / (1.0 - mask_prob)))


# -- ELECTRA as a masked LM (Appendix G) -------------------------------------------------------

def electra_mlm_scores(gen_log_probs: tf.Tensor, real_probs: tf.Tensor,
                       mask_prob: float) -> tf.Tensor:
    """Appendix G: p_data(x|c) ∝ D pG / (a (1 - D) + pG), a = (1 - mask_prob) / mask_prob.

    gen_log_probs, real_probs: [..., K] for K candidates (real_probs = the discriminator's
    probability that the candidate is ORIGINAL, i.e. 1 - sigmoid(replaced logit)).
    Returns the unnormalised scores [..., K].
    """
    a = (1.0 - mask_prob) / mask_prob
    p_g = tf.exp(gen_log_probs)
    return real_probs * p_g / (a * (1.0 - real_probs) + p_g)
