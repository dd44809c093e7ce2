"""Replace MLM and All-Tokens MLM (Table 5): a masked LM `mlm_predictions/` on the discriminator
encoder, reading the generator's samples instead of [MASK] tokens.

- Replace MLM (`replace_mlm`): predicts the original token at the masked positions;
- All-Tokens MLM (`all_tokens_mlm`): predicts every token through a copy mechanism, the copy
  probability from `discriminator_predictions/`: p = D [x = input] + (1 - D) softmax.

    total = gen_weight * generator masked-LM loss + main masked-LM loss
The reported masked-LM figures are the main model's at the masked positions.
"""
import tensorflow as tf

from configure_pretraining import PretrainingConfig
from model import layers, modeling
from pretrain import masking
from pretrain.heads import DiscriminatorHead, GeneratorHead
from pretrain.objectives import functions
from pretrain.objectives.base import PretrainingOutput, Step
from pretrain.objectives.replaced_token_detection import cloze_loss


class ReplacedMaskedLM(tf.Module):
    reads_samples = True

    def __init__(self, config: PretrainingConfig, disc_config: modeling.BertConfig,
                 embeddings: modeling.Embeddings, special_ids: masking.SpecialIds, seed: int):
        super().__init__(name="replaced_mlm")
        self.head = GeneratorHead(disc_config.hidden_size, int(disc_config.embedding_size),
                                  disc_config.vocab_size, disc_config, seed,
                                  scope="mlm_predictions")
        self.copy_head = DiscriminatorHead(disc_config, seed) if config.all_tokens_mlm else None
        self.embeddings = embeddings  # the discriminator's: the head's output table
        self.gen_weight = config.gen_weight
        self.special_ids = special_ids

    def __call__(self, step: Step) -> PretrainingOutput:
        masked = step.masked
        weights, positions = masked.masked_lm_weights, masked.masked_lm_positions
        table = self.embeddings.word_embeddings
        if self.copy_head is not None:  # All-Tokens MLM
            original_ids, fake_ids = step.corrupted.original_ids, step.corrupted.fake_ids
            mlm_logits = self.head(step.sequence_output, table)  # [B, L, V]
            copy_logits = self.copy_head(step.sequence_output)
            token_nll = functions.copy_mechanism_nll(mlm_logits, copy_logits, fake_ids,
                                                     original_ids)
            token_weights = tf.cast(masking.candidates_mask(
                original_ids, masked.input_mask, self.special_ids), tf.float32)
            main_loss = tf.reduce_sum(token_weights * token_nll) / (
                tf.reduce_sum(token_weights) + 1e-6)
            all_preds = functions.copy_mechanism_predictions(mlm_logits, copy_logits, fake_ids)
            example_loss = masking.gather_positions(token_nll, positions)
            preds = masking.gather_positions(all_preds, positions)
        else:  # Replace MLM
            hidden = masking.gather_positions(step.sequence_output, positions)
            mlm_logits = self.head(hidden, table)  # [B, N, V]
            example_loss = layers.sparse_softmax_cross_entropy(mlm_logits, masked.masked_lm_ids)
            main_loss = tf.reduce_sum(weights * example_loss) / (step.denominators.mlm + 1e-6)
            preds = tf.argmax(mlm_logits, -1, output_type=tf.int32)
        gen_loss = (step.mlm.loss if step.generated.cloze_logits is None
                    else cloze_loss(step.generated.cloze_logits, masked, self.special_ids))
        mlm_loss_sum = tf.reduce_sum(weights * example_loss)
        zero = tf.constant(0.0, tf.float32)
        return PretrainingOutput(
            total_loss=self.gen_weight * gen_loss + main_loss,
            mlm_loss=mlm_loss_sum / (step.denominators.mlm + 1e-6), disc_loss=zero,
            mlm_loss_sum=mlm_loss_sum, mlm_weight_sum=tf.reduce_sum(weights), disc_loss_sum=zero,
            disc_weight_sum=tf.reduce_sum(tf.cast(masked.input_mask, tf.float32)),
            masked_lm_ids=masked.masked_lm_ids, masked_lm_weights=weights,
            masked_lm_preds=preds, masked_lm_example_loss=example_loss,
            sampled_ids=step.sampled, input_mask=masked.input_mask)
