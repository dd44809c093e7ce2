"""ELECTRA's pre-training model: the step of Section 2 of the paper in one place.

    mask -> generator -> sample -> corrupted input and labels -> discriminator -> weighted losses

The generator (pretrain/generators.py) and the objective that weighs the losses
(pretrain/objectives/: BERT, ELECTRA and its variants, Replace/All-Tokens MLM) are chosen once,
from the config. Variables carry the official names: the discriminator under `electra/`, the
generator encoder under `generator/` (sharing `electra/embeddings/*` unless `embedding_sharing`
is untied; under gdes the discriminator adds `electra/embeddings/word_embeddings_delta`,
model/embedding_sharing.py), the masked-LM head under `generator_predictions/` and the
replaced-token-detection head under `discriminator_predictions/`.

Losses, exactly as the official model:
    mlm  = sum(w * -log p(original)) / (sum(w) + 1e-6)          over the masked positions
    disc = sum(mask * sigmoid_xent(logit, is_replaced)) / (sum(mask) + 1e-6)   over real tokens
    total = gen_weight * mlm + disc_weight * disc
Only the N masked positions go through the vocabulary projection. All randomness (masking,
Gumbel noise, dropout) is a pure function of (seed, step, example index): see pretrain/rng.py.
"""
import tensorflow as tf

from configure_pretraining import PretrainingConfig
from model import embedding_sharing, modeling
from pretrain import generators, masking
from pretrain import rng as rng_lib
from pretrain.objectives import ReplacedTokenDetection, build_objective
from pretrain.objectives.base import Corrupted, Denominators, PretrainingOutput, Step, masked_lm
from util import checkpoint, stateless_random

class PretrainingModel(tf.Module):
    """The discriminator encoder `electra/`, a generator and an objective, built from a config.

    Which generator (pretrain/generators.py) and which objective (pretrain/objectives/) follow
    the official code; `__call__` is the ELECTRA step that connects them.
    """

    def __init__(self, config: PretrainingConfig, special_ids: masking.SpecialIds,
                 compute_dtype: str | None = None, seed: int | None = None,
                 unigram_counts=None):
        """unigram_counts: int [V] token counts, required for unigram_generator
        (objectives.functions.count_unigrams counts them on the training tfrecords)."""
        super().__init__(name="pretraining_model")
        self.config = config
        self.special_ids = special_ids
        self.seed = config.seed if seed is None else seed
        dtype = compute_dtype or config.compute_dtype
        self.disc_config = config.bert_config()
        self.discriminator_encoder = modeling.BertModel(
            self.disc_config, "electra", embeddings=_discriminator_embeddings(config, self.seed),
            compute_dtype=dtype, seed=self.seed, recompute_grad=config.recompute_grad)
        self.generator, self.generator_config = generators.build_generator(
            config, self.discriminator_encoder, special_ids, dtype, self.seed, unigram_counts)
        self.objective = build_objective(config, self.discriminator_encoder,
                                         self.generator_config, special_ids, self.seed)

    @property
    def has_discriminator(self) -> bool:
        """Whether the objective trains a replaced-token discriminator (ELECTRA, Electric)."""
        return isinstance(self.objective, ReplacedTokenDetection)

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

    def __call__(self, masked: masking.MaskedInputs, *, training: bool,
                 rng: rng_lib.ExampleRng, dropout_seed=None,
                 denominators: Denominators | None = None) -> PretrainingOutput:
        """The ELECTRA step on masked inputs (Section 2 of the paper).

        rng: the example-aligned noise source (Gumbel sampling); dropout_seed: int [2], needed
        when training; denominators: global loss denominators (default: this batch's, which
        gives the official per-batch losses).
        """
        if denominators is None:
            denominators = self.denominators(masked)
        gen_seed, disc_seed = _dropout_seeds(training, dropout_seed)
        # 1. The generator fills the masked positions (a masked LM on them).
        generated = self.generator(masked, training=training, seed=gen_seed)
        step = Step(masked, denominators, generated, masked_lm(generated.logits, masked,
                                                               denominators))
        if not self.objective.reads_samples:  # BERT: the masked LM is the model
            return self.objective(step)
        # 2. Sample replacements; no gradient flows from the discriminator into the generator.
        sampled = self.sample(generated.logits, masked, rng)
        # 3. The corrupted input and which of its tokens count as replaced.
        corrupted = corrupt(masked, sampled, every_sample_counts=self.config.electric_objective)
        # 4. The discriminator encoder reads it; 5. the objective weighs the losses.
        encoded = self.discriminator_encoder(corrupted.fake_ids, masked.input_mask,
                                             masked.segment_ids, training=training,
                                             seed=disc_seed)
        return self.objective(step._replace(sampled=sampled, corrupted=corrupted,
                                            sequence_output=encoded.sequence_output))

    def sample(self, logits: tf.Tensor, masked: masking.MaskedInputs,
               rng: rng_lib.ExampleRng) -> tf.Tensor:
        """int32 [B, N]: a token per masked position from softmax(logits / temperature),
        Gumbel-max with the example-aligned noise; never the original with disallow_correct."""
        logits = tf.stop_gradient(logits)
        disallow = (tf.one_hot(masked.masked_lm_ids, self.disc_config.vocab_size)
                    if self.config.disallow_correct else None)
        noise = rng.bits(tf.shape(logits), rng_lib.GUMBEL)
        return masking.sample_from_softmax(logits, noise, disallow, self.config.temperature)

    def model_variables(self) -> dict[str, tf.Variable]:
        """name -> variable, each shared variable once (under its owner's name)."""
        unique, seen = [], set()
        for v in self.variables:
            if v.ref() not in seen:
                seen.add(v.ref())
                unique.append(v)
        return checkpoint.by_name(sorted(unique, key=lambda v: v.name))


def _discriminator_embeddings(config: PretrainingConfig, seed: int):
    """Under gdes the discriminator's embeddings (the generator shares the module under them);
    otherwise None: the encoder builds its own, as always."""
    if config.embedding_sharing != "gdes":
        return None
    shared = modeling.Embeddings(config.bert_config(), "electra", seed)
    return embedding_sharing.GradientDisentangledEmbeddings(shared)


def _dropout_seeds(training: bool, dropout_seed) -> tuple:
    """The generator's and the discriminator's dropout seeds (None when not training)."""
    if not training:
        return None, None
    if dropout_seed is None:
        raise ValueError("dropout_seed is required when training")
    return tuple(stateless_random.fold_in(dropout_seed, i, alg="philox") for i in (1, 2))


def corrupt(masked: masking.MaskedInputs, sampled: tf.Tensor,
            every_sample_counts: bool = False) -> Corrupted:
    """The originals with the samples written at every chosen position. A sample equal to the
    original counts as real (Electric, every_sample_counts: every sample counts as noise)."""
    original_ids = masking.unmask(masked)
    fake_ids, updated = masking.scatter_update(original_ids, sampled, masked.masked_lm_positions)
    if every_sample_counts:
        labels = updated
    else:
        labels = updated * tf.cast(tf.not_equal(fake_ids, original_ids), tf.int32)
    return Corrupted(original_ids, fake_ids, updated, labels)
