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

The paper's other objectives (hparams of configure_pretraining.py; helpers in
pretrain/objectives.py): electra_15 (disc loss on the masked positions only), replace_mlm and
all_tokens_mlm (a masked LM `electra/` + `mlm_predictions/` reading generator samples; the latter
predicts every token with the copy probability from `discriminator_predictions/`; total =
gen_weight * generator mlm + the main masked-LM loss), unigram_generator, adversarial_generator
(REINFORCE, baseline head `generator_baseline/`), freeze_generator (two-stage, stage 2) and
electric_objective with two_tower_generator (`generator_ltr/`, `generator_rtl/`,
`cloze_predictions/`; generator loss = cloze loss over every maskable token).
"""
import contextlib
import copy
from typing import NamedTuple

import numpy as np
import tensorflow as tf

from configure_pretraining import PretrainingConfig
from model import layers, modeling
from pretrain import masking, objectives
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


@contextlib.contextmanager
def _trainable_scope(trainable: bool):
    """Variables created inside get `trainable` (False: frozen, e.g. a two-stage generator)."""
    if trainable:
        yield
        return

    def creator(next_creator, **kwargs):
        kwargs["trainable"] = False
        return next_creator(**kwargs)

    with tf.variable_creator_scope(creator):
        yield


class GeneratorHead(tf.Module):
    """generator_predictions: dense + activation + LayerNorm to the embedding size, then logits
    against the (shared) word-embedding table plus `output_bias`."""

    def __init__(self, hidden_size: int, embedding_size: int, vocab_size: int,
                 config: modeling.BertConfig, seed: int, scope: str = "generator_predictions"):
        super().__init__(name=scope)
        self.dense = layers.Dense(hidden_size, embedding_size, f"{scope}/dense",
                                  config.hidden_act, config.initializer_range, seed)
        self.layer_norm = layers.LayerNorm(embedding_size, f"{scope}/LayerNorm")
        self.output_bias = layers.create_variable(f"{scope}/output_bias", [vocab_size], "zeros")

    def __call__(self, hidden: tf.Tensor, embedding_table: tf.Variable) -> tf.Tensor:
        """hidden [B, N, H] (compute dtype) -> float32 logits [B, N, V]."""
        x = self.layer_norm(self.dense(hidden))
        shape = tf.shape(x)
        # One [B*N, E] x [E, V] GEMM. A [B, N, E] x [V, E] batched matmul would broadcast the
        # table: its gradient then becomes a [B, V, E] tensor summed over B (measured on
        # ELECTRA-Small, batch 16: 4.5% of the step's op time and 250 MB; now 2.5%).
        logits = tf.matmul(tf.reshape(x, [-1, shape[-1]]), tf.cast(embedding_table, x.dtype),
                           transpose_b=True)
        logits = tf.reshape(logits, tf.concat([shape[:-1], [-1]], 0))
        logits.set_shape(x.shape[:-1].concatenate(embedding_table.shape[:1]))
        # Softmax and loss in float32 whatever the compute dtype.
        return tf.nn.bias_add(tf.cast(logits, tf.float32), self.output_bias)


class DiscriminatorHead(tf.Module):
    """discriminator_predictions: dense(hidden, activation) then dense_1 to one logit per token."""

    def __init__(self, config: modeling.BertConfig, seed: int):
        super().__init__(name="discriminator_predictions")
        h = config.hidden_size
        self.dense = layers.Dense(h, h, "discriminator_predictions/dense", config.hidden_act,
                                  config.initializer_range, seed)
        # Official: tf.layers.dense(hidden, units=1) without an initializer (Glorot-uniform).
        self.dense_1 = layers.Dense(h, 1, "discriminator_predictions/dense_1", seed=seed,
                                    init="glorot_uniform")

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
                 compute_dtype: str | None = None, seed: int | None = None,
                 unigram_counts=None):
        """unigram_counts: int [V] token counts for unigram_generator (default: counted on the
        training tfrecords of `config`)."""
        super().__init__(name="pretraining_model")
        self.config = config
        self.special_ids = special_ids
        self.seed = config.seed if seed is None else seed
        dtype = compute_dtype or config.compute_dtype
        self.disc_config = config.bert_config()
        self.discriminator_encoder = modeling.BertModel(self.disc_config, "electra",
                                                        compute_dtype=dtype, seed=self.seed,
                                                        recompute_grad=config.recompute_grad)
        self.has_discriminator = config.electra_objective or config.electric_objective
        # Replace MLM / All-Tokens MLM: a masked LM reading generator samples.
        self.replaced_mlm = config.replace_mlm or config.all_tokens_mlm
        self.generator_config = None
        self.generator_encoder = None
        self.generator_head = None
        self.two_tower = None
        self.unigram = None
        if config.unigram_generator:
            if unigram_counts is None:
                from pretrain import input_pipeline
                files = input_pipeline.find_files(config.pretrain_tfrecords,
                                                  config.eval_tfrecords).train
                unigram_counts = objectives.count_unigrams(
                    files, self.disc_config.vocab_size, config.max_seq_length,
                    config.unigram_max_examples)
            self.unigram = tf.constant(objectives.unigram_logits(
                np.asarray(unigram_counts), special_ids))
        elif not config.uniform_generator:
            separate = (self.has_discriminator or self.replaced_mlm) and config.untied_generator
            if separate:
                # Two-stage training needs a generator of exactly the discriminator's shape.
                gen_config = (copy.deepcopy(self.disc_config) if config.freeze_generator
                              else config.generator_config())
                shared = None
                if config.freeze_generator:
                    pass  # its own (frozen) copy of the embeddings: D keeps training its own
                elif config.untied_generator_embeddings:
                    # Official: own embeddings of the generator's hidden size.
                    gen_config = copy.deepcopy(gen_config)
                    gen_config.embedding_size = gen_config.hidden_size
                else:
                    shared = self.discriminator_encoder.embeddings
                self.generator_config = gen_config
                # freeze_generator (two-stage, stage 2): the generator's own variables are
                # created non-trainable, so the optimizer (incl. weight decay) never moves them.
                with _trainable_scope(not config.freeze_generator):
                    if config.two_tower_generator:
                        self.two_tower = objectives.TwoTowerGenerator(
                            gen_config, shared, dtype, self.seed,
                            recompute_grad=config.recompute_grad)
                        self.generator_encoder = self.two_tower
                    else:
                        self.generator_encoder = modeling.BertModel(
                            gen_config, "generator", embeddings=shared, compute_dtype=dtype,
                            seed=self.seed, recompute_grad=config.recompute_grad)
            else:
                self.generator_config = self.disc_config
                self.generator_encoder = self.discriminator_encoder
            table = self.generator_encoder.embeddings.word_embeddings
            with _trainable_scope(not config.freeze_generator):
                if self.two_tower is not None:
                    self.generator_head = GeneratorHead(
                        self.two_tower.output_size, int(table.shape[1]),
                        self.disc_config.vocab_size, self.disc_config, self.seed,
                        scope="cloze_predictions")
                else:
                    self.generator_head = GeneratorHead(
                        self.generator_config.hidden_size, int(table.shape[1]),
                        self.disc_config.vocab_size, self.disc_config, self.seed)
        self.baseline_head = None
        if config.adversarial_generator:
            self.baseline_head = layers.Dense(
                self.generator_config.hidden_size, 1, "generator_baseline/dense", None,
                self.disc_config.initializer_range, self.seed)
        self.mlm_head = None
        if self.replaced_mlm:
            self.mlm_head = GeneratorHead(
                self.disc_config.hidden_size, int(self.disc_config.embedding_size),
                self.disc_config.vocab_size, self.disc_config, self.seed, scope="mlm_predictions")
        self.discriminator_head = (DiscriminatorHead(self.disc_config, self.seed)
                                   if self.has_discriminator or config.all_tokens_mlm else None)

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
        """float32 logits [B, N, V] of the generator at the masked positions."""
        return self._generator_outputs(masked, training, seed)[0]

    def _generator_outputs(self, masked: masking.MaskedInputs, training: bool, seed):
        """float32 logits [B, N, V] at the masked positions, the generator's sequence output
        there [B, N, Hg] (None without a generator network) and, for the two-tower generator,
        the cloze logits at every position [B, L, V] (else None)."""
        shape = tf.shape(masked.masked_lm_ids)
        vocab = self.disc_config.vocab_size
        if self.unigram is not None:
            return tf.broadcast_to(self.unigram, [shape[0], shape[1], vocab]), None, None
        if self.generator_encoder is None:  # uniform generator: zero logits
            return tf.zeros([shape[0], shape[1], vocab], tf.float32), None, None
        table = self.generator_encoder.embeddings.word_embeddings
        if self.two_tower is not None:
            # The cloze model reads the ORIGINAL tokens: position t never sees itself.
            original = masking.unmask(masked)
            reprs = self.two_tower(original, masked.input_mask, masked.segment_ids,
                                   training=training, seed=seed)
            cloze = self.generator_head(reprs, table)
            return (masking.gather_positions(cloze, masked.masked_lm_positions), None, cloze)
        encoded = self.generator_encoder(masked.input_ids, masked.input_mask, masked.segment_ids,
                                         training=training, seed=seed)
        hidden = masking.gather_positions(encoded.sequence_output, masked.masked_lm_positions)
        return self.generator_head(hidden, table), hidden, None

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
        logits, gen_hidden, cloze_logits = self._generator_outputs(masked, training, gen_seed)
        if cfg.freeze_generator:
            logits = tf.stop_gradient(logits)
        weights = masked.masked_lm_weights
        example_loss = tf.nn.sparse_softmax_cross_entropy_with_logits(
            labels=masked.masked_lm_ids, logits=logits)
        mlm_loss_sum = tf.reduce_sum(weights * example_loss)
        mlm_loss = mlm_loss_sum / (denominators.mlm + 1e-6)
        gen_loss = mlm_loss
        if cloze_logits is not None:
            # Electric's generator loss: the cloze loss at every maskable position.
            original = masking.unmask(masked)
            cloze_weights = tf.cast(masking.candidates_mask(
                original, masked.input_mask, self.special_ids), tf.float32)
            cloze_loss = tf.nn.sparse_softmax_cross_entropy_with_logits(
                labels=original, logits=cloze_logits)
            gen_loss = tf.reduce_sum(cloze_weights * cloze_loss) / (
                tf.reduce_sum(cloze_weights) + 1e-6)
        preds = tf.argmax(logits, -1, output_type=tf.int32)
        zero = tf.constant(0.0, tf.float32)
        token_weights = tf.cast(masked.input_mask, tf.float32)
        if not (self.has_discriminator or self.replaced_mlm):
            total = cfg.gen_weight * mlm_loss
            return PretrainingOutput(
                total, mlm_loss, zero, mlm_loss_sum, tf.reduce_sum(weights), zero,
                tf.reduce_sum(token_weights), masked.masked_lm_ids,
                weights, preds, example_loss, None, None, None, None, None, masked.input_mask)

        # Sampling: no gradient flows from the discriminator into the generator.
        sample_logits = tf.stop_gradient(logits) / cfg.temperature
        disallow = (tf.one_hot(masked.masked_lm_ids, self.disc_config.vocab_size)
                    if cfg.disallow_correct else None)
        noise = rng.uniform(tf.shape(sample_logits), rng_lib.GUMBEL)
        sampled = tf.stop_gradient(masking.sample_from_softmax(sample_logits, noise, disallow))

        # Fake inputs: originals with the samples written at every chosen position. A sample
        # equal to the original counts as real (Electric: every sample counts as noise).
        original_ids = masking.unmask(masked)
        fake_ids, updated = masking.scatter_update(original_ids, sampled,
                                                   masked.masked_lm_positions)
        if cfg.electric_objective:
            labels = updated
        else:
            labels = updated * tf.cast(tf.not_equal(fake_ids, original_ids), tf.int32)

        encoded = self.discriminator_encoder(fake_ids, masked.input_mask, masked.segment_ids,
                                             training=training, seed=disc_seed)
        if self.replaced_mlm:
            return self._replaced_mlm_output(masked, encoded.sequence_output, fake_ids,
                                             original_ids, gen_loss, denominators, sampled,
                                             labels)

        disc_logits = self.discriminator_head(encoded.sequence_output)
        if cfg.electric_objective:
            disc_logits = objectives.electric_logits(
                disc_logits, tf.nn.log_softmax(cloze_logits), fake_ids, cfg.mask_prob)
        # ELECTRA 15%: only the positions the generator wrote to count.
        if cfg.electra_15:
            token_weights = tf.cast(updated, tf.float32)
            disc_denominator = denominators.mlm
        else:
            disc_denominator = denominators.disc
        token_losses = tf.nn.sigmoid_cross_entropy_with_logits(
            labels=tf.cast(labels, tf.float32), logits=disc_logits) * token_weights
        disc_loss_sum = tf.reduce_sum(token_losses)
        disc_loss = disc_loss_sum / (disc_denominator + 1e-6)
        disc_example_loss = tf.reduce_sum(token_losses, -1) / (
            1e-6 + tf.reduce_sum(token_weights, -1))
        if cfg.adversarial_generator:
            gen_loss = self._adversarial_loss(logits, gen_hidden, sampled, disc_logits, labels,
                                              masked, denominators)
        if cfg.freeze_generator:
            gen_loss = tf.stop_gradient(gen_loss)
        total = cfg.gen_weight * gen_loss + cfg.disc_weight * disc_loss
        disc_preds = tf.cast(disc_logits > 0, tf.int32)  # official round((sign + 1) / 2)
        return PretrainingOutput(
            total, mlm_loss, disc_loss, mlm_loss_sum, tf.reduce_sum(weights), disc_loss_sum,
            tf.reduce_sum(token_weights), masked.masked_lm_ids, weights, preds, example_loss,
            sampled, tf.sigmoid(disc_logits), disc_preds, labels, disc_example_loss,
            # Metrics (accuracy, AUC) over every real token, also for electra_15: restricting
            # them to the masked positions would count the rest as confident negatives.
            masked.input_mask)

    def _adversarial_loss(self, logits, gen_hidden, sampled, disc_logits, labels, masked,
                          denominators):
        """Appendix F: REINFORCE towards a higher discriminator loss on the sampled tokens,
        minus a learned baseline; replaces the generator's maximum-likelihood loss."""
        weights = masked.masked_lm_weights
        positions = masked.masked_lm_positions
        sample_log_probs = tf.gather(tf.nn.log_softmax(logits), sampled, batch_dims=2)
        token_rewards = tf.nn.sigmoid_cross_entropy_with_logits(
            labels=tf.cast(labels, tf.float32), logits=disc_logits)
        rewards = masking.gather_positions(token_rewards, positions)
        baseline_logits = tf.cast(tf.squeeze(self.baseline_head(gen_hidden), -1), tf.float32)
        policy, baseline = objectives.reinforce_losses(sample_log_probs, rewards,
                                                       baseline_logits, weights,
                                                       denominators.mlm)
        return policy + baseline

    def _replaced_mlm_output(self, masked, sequence_output, fake_ids, original_ids, gen_loss,
                             denominators, sampled, labels) -> PretrainingOutput:
        """Replace MLM (masked positions only) or All-Tokens MLM (every real token, copy
        mechanism) on the sampled input; the reported masked-LM metrics are the main model's
        at the masked positions."""
        cfg = self.config
        weights = masked.masked_lm_weights
        positions = masked.masked_lm_positions
        table = self.discriminator_encoder.embeddings.word_embeddings
        if cfg.all_tokens_mlm:
            mlm_logits = self.mlm_head(sequence_output, table)  # [B, L, V]
            copy_logits = self.discriminator_head(sequence_output)
            token_nll = objectives.copy_mechanism_nll(mlm_logits, copy_logits, fake_ids,
                                                      original_ids)
            token_weights = tf.cast(masking.candidates_mask(
                original_ids, masked.input_mask, self.special_ids), tf.float32)
            main_loss = tf.reduce_sum(token_weights * token_nll) / (
                tf.reduce_sum(token_weights) + 1e-6)
            all_preds = objectives.copy_mechanism_predictions(mlm_logits, copy_logits, fake_ids)
            example_loss = masking.gather_positions(token_nll, positions)
            preds = masking.gather_positions(all_preds, positions)
        else:
            hidden = masking.gather_positions(sequence_output, positions)
            mlm_logits = self.mlm_head(hidden, table)  # [B, N, V]
            example_loss = tf.nn.sparse_softmax_cross_entropy_with_logits(
                labels=masked.masked_lm_ids, logits=mlm_logits)
            main_loss = tf.reduce_sum(weights * example_loss) / (denominators.mlm + 1e-6)
            preds = tf.argmax(mlm_logits, -1, output_type=tf.int32)
        mlm_loss_sum = tf.reduce_sum(weights * example_loss)
        total = cfg.gen_weight * gen_loss + main_loss
        zero = tf.constant(0.0, tf.float32)
        return PretrainingOutput(
            total, mlm_loss_sum / (denominators.mlm + 1e-6), zero, mlm_loss_sum,
            tf.reduce_sum(weights), zero, tf.reduce_sum(tf.cast(masked.input_mask, tf.float32)),
            masked.masked_lm_ids, weights, preds, example_loss, sampled, None, None, None, None,
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
