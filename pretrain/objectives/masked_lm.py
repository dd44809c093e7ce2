"""BERT's objective: the generator is the model, trained as a masked LM (electra_objective false).

    total = gen_weight * mlm
"""
import tensorflow as tf

from pretrain.objectives.base import PretrainingOutput, Step


class MaskedLanguageModel(tf.Module):
    reads_samples = False  # the step stops after the generator

    def __init__(self, gen_weight: float):
        super().__init__(name="masked_lm_objective")
        self.gen_weight = gen_weight

    def __call__(self, step: Step) -> PretrainingOutput:
        masked, mlm = step.masked, step.mlm
        zero = tf.constant(0.0, tf.float32)
        return PretrainingOutput(
            total_loss=self.gen_weight * mlm.loss, mlm_loss=mlm.loss, disc_loss=zero,
            mlm_loss_sum=mlm.loss_sum, mlm_weight_sum=tf.reduce_sum(masked.masked_lm_weights),
            disc_loss_sum=zero,
            disc_weight_sum=tf.reduce_sum(tf.cast(masked.input_mask, tf.float32)),
            masked_lm_ids=masked.masked_lm_ids, masked_lm_weights=masked.masked_lm_weights,
            masked_lm_preds=mlm.preds, masked_lm_example_loss=mlm.example_loss,
            input_mask=masked.input_mask)
