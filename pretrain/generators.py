"""The generators: what fills the masked positions, behind one interface.

    generator(masked, training=..., seed=...) -> GeneratorOutput(logits [B, N, V] at the masked
        positions, float32; hidden [B, N, Hg] there or None; cloze_logits [B, L, V] or None)

- MaskedLMGenerator: a small BERT `generator/` (or, tied, the discriminator's own `electra/`
  encoder) reading the masked input, and the `generator_predictions/` head -- ELECTRA's default;
- ClozeGenerator: Electric's two-tower cloze model (`generator_ltr/`, `generator_rtl/`,
  `cloze_predictions/`) reading the ORIGINAL tokens, so position t never sees itself;
- UnigramGenerator: token frequencies counted on the training data (Figure 3);
- UniformGenerator: every token equally likely.

`build_generator` picks one from the config, as the official code decides which networks exist.
"""
import contextlib
import copy
from typing import NamedTuple

import numpy as np
import tensorflow as tf

from configure_pretraining import PretrainingConfig
from model import embedding_sharing, modeling
from pretrain import masking
from pretrain.heads import GeneratorHead
from pretrain.objectives import functions
from util import stateless_random


class GeneratorOutput(NamedTuple):
    logits: tf.Tensor  # float32 [B, N, V] at the masked positions
    hidden: tf.Tensor | None = None  # [B, N, Hg]: the generator's sequence output there
    cloze_logits: tf.Tensor | None = None  # [B, L, V]: the cloze model's, at every position


class UniformGenerator(tf.Module):
    """Zero logits: every token equally likely."""

    def __init__(self, vocab_size: int):
        super().__init__(name="uniform_generator")
        self.vocab_size = vocab_size

    def __call__(self, masked: masking.MaskedInputs, *, training: bool, seed=None):
        shape = tf.shape(masked.masked_lm_ids)
        return GeneratorOutput(tf.zeros([shape[0], shape[1], self.vocab_size], tf.float32))


class UnigramGenerator(tf.Module):
    """The same unigram distribution at every position; counts come from the caller."""

    def __init__(self, counts, special_ids: masking.SpecialIds):
        super().__init__(name="unigram_generator")
        self.logits = tf.constant(functions.unigram_logits(np.asarray(counts), special_ids))

    def __call__(self, masked: masking.MaskedInputs, *, training: bool, seed=None):
        shape = tf.shape(masked.masked_lm_ids)
        return GeneratorOutput(tf.broadcast_to(self.logits,
                                               [shape[0], shape[1], self.logits.shape[0]]))


class MaskedLMGenerator(tf.Module):
    """A masked LM: encoder on the masked input, head on the masked positions only.
    frozen (two-stage training): its logits carry no gradient."""

    def __init__(self, encoder: modeling.BertModel, head: GeneratorHead, frozen: bool = False):
        super().__init__(name="masked_lm_generator")
        self.encoder = encoder
        self.head = head
        self.frozen = frozen

    def __call__(self, masked: masking.MaskedInputs, *, training: bool, seed=None):
        encoded = self.encoder(masked.input_ids, masked.input_mask, masked.segment_ids,
                               training=training, seed=seed)
        hidden = masking.gather_positions(encoded.sequence_output, masked.masked_lm_positions)
        logits = self.head(hidden, self.encoder.embeddings.word_embeddings)
        return GeneratorOutput(tf.stop_gradient(logits) if self.frozen else logits, hidden)


class ClozeGenerator(tf.Module):
    """Electric's generator: the two towers read the original tokens; cloze logits everywhere."""

    def __init__(self, towers: "TwoTowerEncoder", head: GeneratorHead, frozen: bool = False):
        super().__init__(name="cloze_generator")
        self.towers = towers
        self.head = head
        self.frozen = frozen

    def __call__(self, masked: masking.MaskedInputs, *, training: bool, seed=None):
        original = masking.unmask(masked)
        reprs = self.towers(original, masked.input_mask, masked.segment_ids, training=training,
                            seed=seed)
        cloze = self.head(reprs, self.towers.embeddings.word_embeddings)
        logits = masking.gather_positions(cloze, masked.masked_lm_positions)
        return GeneratorOutput(tf.stop_gradient(logits) if self.frozen else logits, None, cloze)


@contextlib.contextmanager
def trainable_scope(trainable: bool):
    """Variables created inside get `trainable` (False: frozen, e.g. a two-stage generator)."""
    if trainable:
        yield
        return

    def creator(next_creator, **kwargs):
        kwargs["trainable"] = False
        return next_creator(**kwargs)

    with tf.variable_creator_scope(creator):
        yield


def build_generator(config: PretrainingConfig, discriminator: modeling.BertModel,
                    special_ids: masking.SpecialIds, compute_dtype: str, seed: int,
                    unigram_counts=None):
    """(generator, its BertConfig or None) for `config`, as the official code builds it.

    A separate `generator/` network exists when a discriminator (or Replace/All-Tokens MLM)
    reads its samples and `untied_generator` (default); it shares the discriminator's
    embeddings unless `embedding_sharing` is untied (under gdes: the module holding E_G).
    Otherwise the discriminator's encoder IS the generator. Two-stage training
    (`freeze_generator`) gives it the discriminator's shape, its own embeddings, and
    non-trainable variables.

    unigram_counts: int [V] token counts, required for unigram_generator.
    """
    disc_config = config.bert_config()
    vocab_size = disc_config.vocab_size
    if config.unigram_generator:
        if unigram_counts is None:
            raise ValueError("unigram_generator needs unigram_counts (functions.count_unigrams)")
        return UnigramGenerator(unigram_counts, special_ids), None
    if config.uniform_generator:
        return UniformGenerator(vocab_size), None
    frozen = config.freeze_generator
    reads_samples = (config.electra_objective or config.electric_objective
                     or config.replace_mlm or config.all_tokens_mlm)
    if not (reads_samples and config.untied_generator):
        table = discriminator.embeddings.word_embeddings
        head = GeneratorHead(disc_config.hidden_size, int(table.shape[1]), vocab_size,
                             disc_config, seed)
        return MaskedLMGenerator(discriminator, head), disc_config
    gen_config = copy.deepcopy(disc_config) if frozen else config.generator_config()
    shared = None
    if frozen:
        pass  # its own (frozen) copy of the embeddings: D keeps training its own
    elif config.embedding_sharing == "untied":
        gen_config = copy.deepcopy(gen_config)  # official: own embeddings of its hidden size
        gen_config.embedding_size = gen_config.hidden_size
    else:
        shared = embedding_sharing.generator_embeddings(discriminator.embeddings)
    with trainable_scope(not frozen):
        if config.two_tower_generator:
            towers = TwoTowerEncoder(gen_config, shared, compute_dtype, seed,
                                     recompute_grad=config.recompute_grad)
            head = GeneratorHead(towers.output_size,
                                 int(towers.embeddings.word_embeddings.shape[1]), vocab_size,
                                 disc_config, seed, scope="cloze_predictions")
            return ClozeGenerator(towers, head, frozen), gen_config
        encoder = modeling.BertModel(gen_config, "generator", embeddings=shared,
                                     compute_dtype=compute_dtype, seed=seed,
                                     recompute_grad=config.recompute_grad)
        head = GeneratorHead(gen_config.hidden_size,
                             int(encoder.embeddings.word_embeddings.shape[1]), vocab_size,
                             disc_config, seed)
    return MaskedLMGenerator(encoder, head, frozen), gen_config


# -- Electric's two towers ------------------------------------------------------------------------

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


class TwoTowerEncoder(tf.Module):
    """Electric's generator encoder: `generator_ltr/` and `generator_rtl/` encoders on the UNMASKED input;
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
            seeds = [stateless_random.fold_in(seed, i, alg="philox") for i in (1, 2)]
        ltr = self.ltr(input_ids, input_mask, segment_ids, training=training, seed=seeds[0])
        rtl = self.rtl(input_ids, input_mask, segment_ids, training=training, seed=seeds[1])
        return tf.concat([_shift(ltr.sequence_output, -1), _shift(rtl.sequence_output, 1)], -1)
