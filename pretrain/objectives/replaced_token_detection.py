"""ELECTRA's objective, replaced token detection, and the variants of the paper that change it:

    disc  = sum(w * sigmoid_xent(D(x_corrupt)_t, replaced_t)) / (sum(w) + 1e-6)
    total = gen_weight * generator loss + disc_weight * disc

- ELECTRA (default): w = every real token; generator loss = its masked-LM loss;
- ELECTRA 15% (`electra_15`, Table 5): w = the masked positions only;
- adversarial generator (`adversarial_generator`, Appendix F): generator loss = REINFORCE on the
  discriminator's loss with a learned baseline `generator_baseline/`;
- Electric (`electric_objective`): D's logit becomes the noise-contrastive logit over the cloze
  generator's probabilities; generator loss = the cloze loss at every maskable token; every
  sampled position counts as noise;
- two-stage (`freeze_generator`, Section 3.2, stage 2): the generator loss carries no gradient.
"""
import tensorflow as tf

from configure_pretraining import PretrainingConfig
from model import layers, modeling
from pretrain import masking
from pretrain.heads import DiscriminatorHead
from pretrain.objectives import functions
from pretrain.objectives.base import PretrainingOutput, Step


def cloze_loss(cloze_logits: tf.Tensor, masked: masking.MaskedInputs,
               special_ids: masking.SpecialIds) -> tf.Tensor:
    """Electric's generator loss: the cloze loss at every maskable position."""
    original = masking.unmask(masked)
    weights = tf.cast(masking.candidates_mask(original, masked.input_mask, special_ids),
                      tf.float32)
    losses = layers.sparse_softmax_cross_entropy(cloze_logits, original)
    return tf.reduce_sum(weights * losses) / (tf.reduce_sum(weights) + 1e-6)


class ReplacedTokenDetection(tf.Module):
    reads_samples = True

    def __init__(self, config: PretrainingConfig, disc_config: modeling.BertConfig,
                 generator_config: modeling.BertConfig | None,
                 special_ids: masking.SpecialIds, seed: int):
        super().__init__(name="replaced_token_detection")
        self.head = DiscriminatorHead(disc_config, seed)
        self.gen_weight, self.disc_weight = config.gen_weight, config.disc_weight
        self.masked_only = config.electra_15
        self.electric_mask_prob = config.mask_prob if config.electric_objective else None
        self.frozen_generator = config.freeze_generator
        self.special_ids = special_ids
        self.baseline = None
        if config.adversarial_generator:
            self.baseline = layers.Dense(generator_config.hidden_size, 1,
                                         "generator_baseline/dense", None,
                                         disc_config.initializer_range, seed)

    def __call__(self, step: Step) -> PretrainingOutput:
        masked, mlm, corrupted = step.masked, step.mlm, step.corrupted
        disc_logits = self.head(step.sequence_output)
        if self.electric_mask_prob is not None:
            disc_logits = functions.electric_logits(
                disc_logits, tf.nn.log_softmax(step.generated.cloze_logits),
                corrupted.fake_ids, self.electric_mask_prob)
        if self.masked_only:
            token_weights = tf.cast(corrupted.updated, tf.float32)
            denominator = step.denominators.mlm
        else:
            token_weights = tf.cast(masked.input_mask, tf.float32)
            denominator = step.denominators.disc
        token_losses = tf.nn.sigmoid_cross_entropy_with_logits(
            labels=tf.cast(corrupted.labels, tf.float32), logits=disc_logits) * token_weights
        disc_loss_sum = tf.reduce_sum(token_losses)
        disc_loss = disc_loss_sum / (denominator + 1e-6)
        gen_loss = self.generator_loss(step, disc_logits)
        return PretrainingOutput(
            total_loss=self.gen_weight * gen_loss + self.disc_weight * disc_loss,
            mlm_loss=mlm.loss, disc_loss=disc_loss, mlm_loss_sum=mlm.loss_sum,
            mlm_weight_sum=tf.reduce_sum(masked.masked_lm_weights),
            disc_loss_sum=disc_loss_sum, disc_weight_sum=tf.reduce_sum(token_weights),
            masked_lm_ids=masked.masked_lm_ids, masked_lm_weights=masked.masked_lm_weights,
            masked_lm_preds=mlm.preds, masked_lm_example_loss=mlm.example_loss,
            sampled_ids=step.sampled, disc_probs=tf.sigmoid(disc_logits),
            disc_preds=tf.cast(disc_logits > 0, tf.int32),  # official round((sign + 1) / 2)
            disc_labels=corrupted.labels,
            disc_example_loss=tf.reduce_sum(token_losses, -1) / (
                1e-6 + tf.reduce_sum(token_weights, -1)),
            # Metrics (accuracy, AUC) over every real token, also for electra_15: restricting
            # them to the masked positions would count the rest as confident negatives.
            input_mask=masked.input_mask)

    def generator_loss(self, step: Step, disc_logits: tf.Tensor) -> tf.Tensor:
        if self.baseline is not None:
            loss = self.adversarial_loss(step, disc_logits)
        elif step.generated.cloze_logits is not None:
            loss = cloze_loss(step.generated.cloze_logits, step.masked, self.special_ids)
        else:
            loss = step.mlm.loss
        return tf.stop_gradient(loss) if self.frozen_generator else loss

    def adversarial_loss(self, step: Step, disc_logits: tf.Tensor) -> tf.Tensor:
        """Appendix F: REINFORCE towards a higher discriminator loss on the sampled tokens,
        minus a learned baseline; replaces the generator's maximum-likelihood loss."""
        masked = step.masked
        sample_log_probs = tf.gather(tf.nn.log_softmax(step.generated.logits), step.sampled,
                                     batch_dims=2)
        token_rewards = tf.nn.sigmoid_cross_entropy_with_logits(
            labels=tf.cast(step.corrupted.labels, tf.float32), logits=disc_logits)
        rewards = masking.gather_positions(token_rewards, masked.masked_lm_positions)
        baseline_logits = tf.cast(tf.squeeze(self.baseline(step.generated.hidden), -1),
                                  tf.float32)
        policy, baseline = functions.reinforce_losses(
            sample_log_probs, rewards, baseline_logits, masked.masked_lm_weights,
            step.denominators.mlm)
        return policy + baseline
