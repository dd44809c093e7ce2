"""ELECTRA's pre-training model: masking, generator, sampling, discriminator and losses.

Variables carry the official names: the discriminator under `electra/`, the generator encoder
under `generator/` (sharing `electra/embeddings/*` unless `untied_generator_embeddings`), the
masked-LM head under `generator_predictions/` (dense, LayerNorm, output_bias; logits against the
shared word-embedding table) and the replaced-token-detection head under
`discriminator_predictions/` (dense, dense_1).

Losses, exactly as the official model:
    mlm  = sum(w * -log p(original)) / (sum(w) + 1e-6)          over the masked positions
    disc = sum(mask * sigmoid_xent(logit, is_replaced)) / (sum(mask) + 1e-6)   over real tokens
    total = gen_weight * mlm + disc_weight * disc
Only the N masked positions go through the vocabulary projection. All randomness (masking,
Gumbel noise, dropout) is a pure function of (seed, step, example index): see pretrain/rng.py.
"""
import copy
from typing import NamedTuple

import tensorflow as tf

from configure_pretraining import PretrainingConfig
from model import layers, modeling
from pretrain import masking
from pretrain import rng as rng_lib


class Denominators(NamedTuple):
    """Global (all replicas, all micro-batches) loss denominators of one step."""
    mlm: tf.Tensor  # float32 scalar: sum of masked_lm_weights
    disc: tf.Tensor  # float32 scalar: sum of input_mask


class PretrainingOutput(NamedTuple):
    total_loss: tf.Tensor  # float32 scalar (official formula over this batch)
    mlm_loss: tf.Tensor
    disc_loss: tf.Tensor  # 0 for the MLM-only objective
    mlm_loss_sum: tf.Tensor  # numerators and denominators, for exact cross-replica losses
    mlm_weight_sum: tf.Tensor
    disc_loss_sum: tf.Tensor
    disc_weight_sum: tf.Tensor
    masked_lm_ids: tf.Tensor  # int32 [B, N]
    masked_lm_weights: tf.Tensor  # float32 [B, N]
    masked_lm_preds: tf.Tensor  # int32 [B, N]: generator argmax
    masked_lm_example_loss: tf.Tensor  # float32 [B, N]: -log p(original) per position
    sampled_ids: tf.Tensor | None  # int32 [B, N]: the generator's samples (ELECTRA only)
    disc_probs: tf.Tensor | None  # float32 [B, L]
    disc_preds: tf.Tensor | None  # int32 [B, L]
    disc_labels: tf.Tensor | None  # int32 [B, L]: 1 where the token was replaced
    disc_example_loss: tf.Tensor | None  # float32 [B]
    input_mask: tf.Tensor  # int32 [B, L]


class GeneratorHead(tf.Module):
    """generator_predictions: dense + activation + LayerNorm to the embedding size, then logits
    against the (shared) word-embedding table plus `output_bias`."""

    def __init__(self, hidden_size: int, embedding_size: int, vocab_size: int,
                 config: modeling.BertConfig, seed: int):
        super().__init__(name="generator_predictions")
        self.dense = layers.Dense(hidden_size, embedding_size, "generator_predictions/dense",
                                  config.hidden_act, config.initializer_range, seed)
        self.layer_norm = layers.LayerNorm(embedding_size, "generator_predictions/LayerNorm")
        self.output_bias = layers.create_variable("generator_predictions/output_bias",
                                                  [vocab_size], "zeros")

    def __call__(self, hidden: tf.Tensor, embedding_table: tf.Variable) -> tf.Tensor:
        """hidden [B, N, H] (compute dtype) -> float32 logits [B, N, V]."""
        x = self.layer_norm(self.dense(hidden))
        logits = tf.matmul(x, tf.cast(embedding_table, x.dtype), transpose_b=True)
        # Softmax and loss in float32 whatever the compute dtype.
        return tf.nn.bias_add(tf.cast(logits, tf.float32), self.output_bias)


class DiscriminatorHead(tf.Module):
    """discriminator_predictions: dense(hidden, activation) then dense_1 to one logit per token."""

    def __init__(self, config: modeling.BertConfig, seed: int):
        super().__init__(name="discriminator_predictions")
        h = config.hidden_size
        self.dense = layers.Dense(h, h, "discriminator_predictions/dense", config.hidden_act,
                                  config.initializer_range, seed)
        self.dense_1 = layers.Dense(h, 1, "discriminator_predictions/dense_1", None,
                                    config.initializer_range, seed)

    def __call__(self, sequence_output: tf.Tensor) -> tf.Tensor:
        """[B, L, H] -> float32 logits [B, L]."""
        return tf.cast(tf.squeeze(self.dense_1(self.dense(sequence_output)), -1), tf.float32)


class PretrainingModel(tf.Module):
    """Generator + discriminator, built from a PretrainingConfig.

    Which networks exist follows the official code:
    - `uniform_generator`: no generator network; samples are uniform over the vocabulary.
    - `electra_objective` and `untied_generator` (default): a small generator encoder
      `generator/`, sharing the discriminator's embeddings unless `untied_generator_embeddings`.
    - otherwise (MLM-only, or `untied_generator: false`): the generator IS the `electra/`
      encoder; with the ELECTRA objective the same weights then also discriminate.
    """

    def __init__(self, config: PretrainingConfig, special_ids: masking.SpecialIds,
                 compute_dtype: str | None = None, seed: int | None = None):
        super().__init__(name="pretraining_model")
        self.config = config
        self.special_ids = special_ids
        self.seed = config.seed if seed is None else seed
        dtype = compute_dtype or config.compute_dtype
        self.disc_config = config.bert_config()
        self.discriminator_encoder = modeling.BertModel(self.disc_config, "electra",
                                                        compute_dtype=dtype, seed=self.seed)
        self.generator_config = None
        self.generator_encoder = None
        self.generator_head = None
        if not config.uniform_generator:
            if config.electra_objective and config.untied_generator:
                gen_config = config.generator_config()
                shared = None
                if config.untied_generator_embeddings:
                    # Official: own embeddings of the generator's hidden size.
                    gen_config = copy.deepcopy(gen_config)
                    gen_config.embedding_size = gen_config.hidden_size
                else:
                    shared = self.discriminator_encoder.embeddings
                self.generator_config = gen_config
                self.generator_encoder = modeling.BertModel(
                    gen_config, "generator", embeddings=shared, compute_dtype=dtype,
                    seed=self.seed)
            else:
                self.generator_config = self.disc_config
                self.generator_encoder = self.discriminator_encoder
            table = self.generator_encoder.embeddings.word_embeddings
            self.generator_head = GeneratorHead(self.generator_config.hidden_size,
                                                int(table.shape[1]), self.disc_config.vocab_size,
                                                self.disc_config, self.seed)
        self.discriminator_head = (DiscriminatorHead(self.disc_config, self.seed)
                                   if config.electra_objective else None)

    # -- the pieces -------------------------------------------------------------------------

    def mask(self, features: dict, rng: rng_lib.ExampleRng) -> masking.MaskedInputs:
        """features: int32 input_ids, input_mask, segment_ids [B, L] -> MaskedInputs."""
        return masking.mask(features["input_ids"], features["input_mask"],
                            features["segment_ids"], mask_prob=self.config.mask_prob,
                            max_predictions_per_seq=self.config.max_predictions_per_seq,
                            special_ids=self.special_ids, rng=rng)

    @staticmethod
    def denominators(masked: masking.MaskedInputs) -> Denominators:
        """This batch's loss denominators (to be summed over replicas and micro-batches)."""
        return Denominators(tf.reduce_sum(masked.masked_lm_weights),
                            tf.reduce_sum(tf.cast(masked.input_mask, tf.float32)))

    def _generator_logits(self, masked: masking.MaskedInputs, training: bool, seed):
        if self.generator_encoder is None:  # uniform generator: zero logits
            shape = tf.shape(masked.masked_lm_ids)
            return tf.zeros([shape[0], shape[1], self.disc_config.vocab_size], tf.float32)
        encoded = self.generator_encoder(masked.input_ids, masked.input_mask, masked.segment_ids,
                                         training=training, seed=seed)
        hidden = masking.gather_positions(encoded.sequence_output, masked.masked_lm_positions)
        return self.generator_head(hidden, self.generator_encoder.embeddings.word_embeddings)

    def __call__(self, masked: masking.MaskedInputs, *, training: bool,
                 rng: rng_lib.ExampleRng, dropout_seed=None,
                 denominators: Denominators | None = None) -> PretrainingOutput:
        """Generator, sampling and discriminator on masked inputs.

        rng: the example-aligned noise source (Gumbel sampling); dropout_seed: int [2], needed
        when training; denominators: global loss denominators (default: this batch's, which
        gives the official per-batch losses).
        """
        cfg = self.config
        if denominators is None:
            denominators = self.denominators(masked)
        gen_seed = disc_seed = None
        if training:
            if dropout_seed is None:
                raise ValueError("dropout_seed is required when training")
            gen_seed = tf.random.experimental.stateless_fold_in(dropout_seed, 1, alg="philox")
            disc_seed = tf.random.experimental.stateless_fold_in(dropout_seed, 2, alg="philox")

        # Generator: masked-LM on the masked positions only.
        logits = self._generator_logits(masked, training, gen_seed)
        weights = masked.masked_lm_weights
        example_loss = tf.nn.sparse_softmax_cross_entropy_with_logits(
            labels=masked.masked_lm_ids, logits=logits)
        mlm_loss_sum = tf.reduce_sum(weights * example_loss)
        mlm_loss = mlm_loss_sum / (denominators.mlm + 1e-6)
        preds = tf.argmax(logits, -1, output_type=tf.int32)
        zero = tf.constant(0.0, tf.float32)
        if not cfg.electra_objective:
            total = cfg.gen_weight * mlm_loss
            return PretrainingOutput(
                total, mlm_loss, zero, mlm_loss_sum, tf.reduce_sum(weights), zero,
                tf.reduce_sum(tf.cast(masked.input_mask, tf.float32)), masked.masked_lm_ids,
                weights, preds, example_loss, None, None, None, None, None, masked.input_mask)

        # Sampling: no gradient flows from the discriminator into the generator.
        sample_logits = tf.stop_gradient(logits) / cfg.temperature
        disallow = (tf.one_hot(masked.masked_lm_ids, self.disc_config.vocab_size)
                    if cfg.disallow_correct else None)
        noise = rng.uniform(tf.shape(sample_logits), rng_lib.GUMBEL)
        sampled = tf.stop_gradient(masking.sample_from_softmax(sample_logits, noise, disallow))

        # Fake inputs: originals with the samples written at every chosen position. A sample
        # equal to the original counts as real.
        original_ids = masking.unmask(masked)
        fake_ids, updated = masking.scatter_update(original_ids, sampled,
                                                   masked.masked_lm_positions)
        labels = updated * tf.cast(tf.not_equal(fake_ids, original_ids), tf.int32)

        encoded = self.discriminator_encoder(fake_ids, masked.input_mask, masked.segment_ids,
                                             training=training, seed=disc_seed)
        disc_logits = self.discriminator_head(encoded.sequence_output)
        token_weights = tf.cast(masked.input_mask, tf.float32)
        token_losses = tf.nn.sigmoid_cross_entropy_with_logits(
            labels=tf.cast(labels, tf.float32), logits=disc_logits) * token_weights
        disc_loss_sum = tf.reduce_sum(token_losses)
        disc_loss = disc_loss_sum / (denominators.disc + 1e-6)
        disc_example_loss = tf.reduce_sum(token_losses, -1) / (
            1e-6 + tf.reduce_sum(token_weights, -1))
        total = cfg.gen_weight * mlm_loss + cfg.disc_weight * disc_loss
        disc_preds = tf.cast(disc_logits > 0, tf.int32)  # official round((sign + 1) / 2)
        return PretrainingOutput(
            total, mlm_loss, disc_loss, mlm_loss_sum, tf.reduce_sum(weights), disc_loss_sum,
            tf.reduce_sum(token_weights), masked.masked_lm_ids, weights, preds, example_loss,
            sampled, tf.sigmoid(disc_logits), disc_preds, labels, disc_example_loss,
            masked.input_mask)

    # -- variables ---------------------------------------------------------------------------

    def model_variables(self) -> dict[str, tf.Variable]:
        """name -> variable, each shared variable once (under its owner's name)."""
        from util import checkpoint
        unique, seen = [], set()
        for v in self.variables:
            if v.ref() not in seen:
                seen.add(v.ref())
                unique.append(v)
        return checkpoint.by_name(sorted(unique, key=lambda v: v.name))
