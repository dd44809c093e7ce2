"""Replaced-token scoring: a pre-trained discriminator (and generator) applied to given token ids.

Rebuilds the networks of a pre-training checkpoint from their architecture configs (the same
modules and variable names as PretrainingModel: `electra/`, `generator/`, the
`discriminator_predictions/` and `generator_predictions/` heads) without the run config, so it
works on our model dirs, on Hugging Face imports and on official release checkpoints.

With `corrupt`, the generator first replaces tokens exactly as in pre-training: 15% of the
positions are chosen (masking.mask, 85% of them shown as [MASK]), the generator samples a token
for each (Gumbel-max at `temperature`), and a sample equal to the original counts as not replaced.
"""
from typing import NamedTuple

import numpy as np
import tensorflow as tf

from model import embedding_sharing, modeling
from pretrain import masking
from pretrain import heads
from pretrain import rng as rng_lib
from util import checkpoint


class Corruption(NamedTuple):
    masked_ids: tf.Tensor  # int32 [B, L]: the generator's input ([MASK] at most chosen positions)
    fake_ids: tf.Tensor  # int32 [B, L]: the discriminator's input
    replaced: tf.Tensor  # int32 [B, L]: 1 where fake_ids differs from the original
    positions: tf.Tensor  # int32 [B, N]: the chosen positions (0 where weight is 0)
    weights: tf.Tensor  # float32 [B, N]
    generator_logits: tf.Tensor  # float32 [B, N, V]


class ReplacedTokenScorer(tf.Module):
    """Discriminator (+ optional generator) of a pre-trained ELECTRA model.

    generator_scope: "generator" for a separate generator encoder, "electra" when the
    discriminator encoder doubles as generator; generator_embeddings: the scope owning the
    generator's embeddings ("electra" when shared, as by default); gdes: the checkpoint shares
    them by GDES (it holds `electra/embeddings/word_embeddings_delta`).
    """

    def __init__(self, disc_config: modeling.BertConfig,
                 generator_config: modeling.BertConfig | None = None,
                 generator_scope: str = "generator", generator_embeddings: str = "electra",
                 gdes: bool = False):
        super().__init__(name="replaced_token_scorer")
        self.disc_config = disc_config
        embeddings = (embedding_sharing.GradientDisentangledEmbeddings(
            modeling.Embeddings(disc_config, "electra")) if gdes else None)
        self.discriminator = modeling.BertModel(disc_config, "electra", embeddings=embeddings)
        self.discriminator_head = heads.DiscriminatorHead(disc_config, 0)
        self.generator = self.generator_head = None
        if generator_config is not None:
            if generator_scope == "electra":
                self.generator = self.discriminator
            else:
                shared = (embedding_sharing.generator_embeddings(self.discriminator.embeddings)
                          if generator_embeddings == "electra" else None)
                self.generator = modeling.BertModel(generator_config, generator_scope,
                                                    embeddings=shared)
            table = self.generator.embeddings.word_embeddings
            self.generator_head = heads.GeneratorHead(
                generator_config.hidden_size, int(table.shape[1]), disc_config.vocab_size,
                disc_config, 0)

    def restore(self, path: str) -> checkpoint.RestoreReport:
        """Loads every variable by name; missing ones are an error listing them."""
        unique = {v.ref(): v for v in self.variables}
        return embedding_sharing.restore(checkpoint.by_name(unique.values()), path)

    def discriminate(self, input_ids, input_mask, segment_ids) -> tf.Tensor:
        """int32 [B, L] each -> float32 logits [B, L] of "this token was replaced"."""
        encoded = self.discriminator(input_ids, input_mask, segment_ids, training=False)
        return self.discriminator_head(encoded.sequence_output)

    def generator_logits(self, input_ids, input_mask, segment_ids, positions) -> tf.Tensor:
        """Masked-LM logits float32 [B, N, V] at `positions` int32 [B, N]."""
        if self.generator is None:
            raise ValueError("this model has no generator (no generator_predictions/ in the "
                             "checkpoint)")
        encoded = self.generator(input_ids, input_mask, segment_ids, training=False)
        hidden = masking.gather_positions(encoded.sequence_output, positions)
        return self.generator_head(hidden, self.generator.embeddings.word_embeddings)

    def corrupt(self, input_ids, input_mask, segment_ids, *, special_ids: masking.SpecialIds,
                mask_prob: float = 0.15, seed: int = 0, temperature: float = 1.0,
                disallow_correct: bool = False) -> Corruption:
        """Lets the generator replace about `mask_prob` of the tokens (as in pre-training)."""
        input_ids, input_mask, segment_ids = (tf.convert_to_tensor(x, tf.int32)
                                              for x in (input_ids, input_mask, segment_ids))
        length = int(input_ids.shape[1])
        # The official budget for a sequence length, at least one prediction.
        n = max(1, min(length, int((mask_prob + 0.005) * length)))
        rng = rng_lib.ExampleRng(seed, 0)
        masked = masking.mask(input_ids, input_mask, segment_ids, mask_prob=mask_prob,
                              max_predictions_per_seq=n, special_ids=special_ids, rng=rng)
        logits = self.generator_logits(masked.input_ids, input_mask, segment_ids,
                                       masked.masked_lm_positions)
        disallow = (tf.one_hot(masked.masked_lm_ids, self.disc_config.vocab_size)
                    if disallow_correct else None)
        noise = rng.bits(tf.shape(logits), rng_lib.GUMBEL)
        sampled = masking.sample_from_softmax(logits, noise, disallow, float(temperature))
        original = masking.unmask(masked)
        fake, updated = masking.scatter_update(original, sampled, masked.masked_lm_positions)
        replaced = updated * tf.cast(tf.not_equal(fake, original), tf.int32)
        return Corruption(masked.input_ids, fake, replaced, masked.masked_lm_positions,
                          masked.masked_lm_weights, logits)


def pad_batch(sequences: list[list[int]], pad_id: int) -> tuple[np.ndarray, np.ndarray]:
    """Right-pads id lists to one length: (input_ids, input_mask) int32 [B, L]."""
    length = max(len(s) for s in sequences)
    ids = np.full([len(sequences), length], pad_id, np.int32)
    mask = np.zeros([len(sequences), length], np.int32)
    for i, s in enumerate(sequences):
        ids[i, :len(s)] = s
        mask[i, :len(s)] = 1
    return ids, mask
