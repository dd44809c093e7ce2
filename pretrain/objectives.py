"""The paper's alternative pre-training objectives (Sections 3.2-3.5, Appendices F and G) and the
official release's Electric objective, as small functions the PretrainingModel composes.

- unigram generator: samples from token frequencies counted on the training tfrecords;
- ELECTRA 15%: the discriminator loss only on the masked positions (a weight mask);
- Replace MLM / All-Tokens MLM: a masked LM reading generator samples instead of [MASK]; the
  all-tokens variant predicts every token through a copy mechanism (Section 3.5);
- adversarial generator: REINFORCE on the discriminator's loss with a learned baseline (App. F);
- Electric: a two-tower cloze generator (a left-to-right and a right-to-left encoder, each
  position seeing only the other tokens) and a noise-contrastive discriminator;
- ELECTRA as a masked LM (Appendix G): ranking the generator's top-k candidates with D.
"""
import numpy as np
import tensorflow as tf

from model import modeling
from pretrain import masking

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
    dataset = tf.data.TFRecordDataset(sorted(files))
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


def _shift(x: tf.Tensor, direction: int) -> tf.Tensor:
    """Rolls [B, L, D] along L: direction -1 moves position t-1 to t, +1 moves t+1 to t."""
    return tf.concat([x[:, direction:], x[:, :direction]], axis=1)


class DirectionalBertModel(modeling.BertModel):
    """A BertModel whose tokens attend only to the left (ltr) or right (rtl), themselves included:
    one tower of Electric's two-tower cloze generator."""

    def __init__(self, config: modeling.BertConfig, scope: str, direction: str, **kwargs):
        if direction not in ("ltr", "rtl"):
            raise ValueError(f"direction must be 'ltr' or 'rtl', got {direction!r}")
        super().__init__(config, scope, **kwargs)
        self.direction = direction

    def attention_bias(self, input_mask, seq_len) -> tf.Tensor:
        lower = tf.linalg.band_part(tf.ones([seq_len, seq_len]), -1, 0)  # j <= i
        allowed = lower if self.direction == "ltr" else tf.transpose(lower)
        padding = tf.cast(input_mask, tf.float32)[:, tf.newaxis, tf.newaxis, :]
        return (1.0 - allowed[tf.newaxis, tf.newaxis] * padding) * -10000.0


class TwoTowerGenerator(tf.Module):
    """Electric's generator: `generator_ltr/` and `generator_rtl/` encoders on the UNMASKED input;
    the representation of position t concatenates ltr at t-1 and rtl at t+1, so it never sees
    token t itself. sequence_output: [B, L, 2H]."""

    def __init__(self, config: modeling.BertConfig, embeddings: modeling.Embeddings | None,
                 compute_dtype: str, seed: int, recompute_grad: bool = False):
        super().__init__(name="two_tower_generator")
        self.ltr = DirectionalBertModel(config, "generator_ltr", "ltr", embeddings=embeddings,
                                        compute_dtype=compute_dtype, seed=seed,
                                        recompute_grad=recompute_grad)
        # Untied embeddings: the right-to-left tower shares the left-to-right tower's table.
        self.rtl = DirectionalBertModel(config, "generator_rtl", "rtl",
                                        embeddings=self.ltr.embeddings,
                                        compute_dtype=compute_dtype, seed=seed,
                                        recompute_grad=recompute_grad)
        self.embeddings = self.ltr.embeddings
        self.output_size = 2 * config.hidden_size

    def __call__(self, input_ids, input_mask, segment_ids, *, training: bool, seed=None):
        seeds = [None, None]
        if training:
            seeds = [tf.random.experimental.stateless_fold_in(seed, i, alg="philox")
                     for i in (1, 2)]
        ltr = self.ltr(input_ids, input_mask, segment_ids, training=training, seed=seeds[0])
        rtl = self.rtl(input_ids, input_mask, segment_ids, training=training, seed=seeds[1])
        return tf.concat([_shift(ltr.sequence_output, -1), _shift(rtl.sequence_output, 1)], -1)


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


def make_two_stage_init(stage1_checkpoint: str, output_prefix: str) -> list[str]:
    """Two-stage training, stage 2: a checkpoint whose discriminator AND generator are the
    stage-1 masked LM (same size): `electra/*` stays, `generator/*` gets copies of every
    `electra/` weight (embeddings included: the frozen generator has its own copy), the
    generator_predictions head stays. Returns the written variable names."""
    from util import checkpoint

    values = checkpoint.read_all(checkpoint.resolve(stage1_checkpoint))
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
    logits = model._generator_logits(masked, False, None)
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
        replaced_logits = model.discriminator_head(encoded.sequence_output)
        at_positions = masking.gather_positions(replaced_logits,
                                                tf.tile(positions, [times, 1]))
        for part in tf.split(at_positions, times, 0):
            real_probs.append(tf.sigmoid(-part))  # P(original) = 1 - P(replaced)
    real_probs = tf.stack(real_probs, -1)  # [B, N, K]
    scores = electra_mlm_scores(top_log_probs, real_probs, model.config.mask_prob)
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
