"""Gradient-disentangled embedding sharing (GDES): the discriminator's token table, in the model
and in checkpoints.

ELECTRA's embedding sharing (ES) gives the generator and the discriminator one
`electra/embeddings/` module. GDES (He, Gao, Chen, DeBERTaV3, ICLR 2023) keeps that module for
the generator and gives the discriminator the token table

    stop_gradient(E_G) + E_delta

E_G = `electra/embeddings/word_embeddings` is trained by the generator's loss only; E_delta =
`electra/embeddings/word_embeddings_delta` starts at zero and is trained by the
discriminator's loss only. The position and token-type tables and the embedding LayerNorm stay
shared as under ES (docs/FIDELITY.md gives the reason).

Everything downstream of pre-training (fine-tuning, probes, exports, continued pre-training
without GDES) sees one discriminator with one table: `fold` (tensors) and `restore` (variables)
are where a GDES checkpoint becomes E_G + E_delta under the official name.
"""
import logging
from typing import Mapping

import numpy as np
import tensorflow as tf

from model import layers
from model import modeling
from util import checkpoint

log = logging.getLogger(__name__)

MODES = ("shared", "untied", "gdes")  # the values of hparam embedding_sharing
TABLE = "electra/embeddings/word_embeddings"
DELTA_SUFFIX = "_delta"
DELTA = TABLE + DELTA_SUFFIX


class GradientDisentangledEmbeddings(tf.Module):
    """The discriminator's embeddings under GDES: the shared module (`shared`, the generator's)
    with the token lookup replaced by stop_gradient(E_G) + E_delta. Same call as
    modeling.Embeddings."""

    def __init__(self, shared: modeling.Embeddings):
        table = checkpoint.checkpoint_name(shared.word_embeddings)
        super().__init__(name=f"{table.split('/')[0]}_gdes_embeddings")
        self.shared = shared
        self.config = shared.config
        # Zero: at step 0 the discriminator reads exactly the generator's table.
        self.word_embeddings_delta = layers.create_variable(
            table + DELTA_SUFFIX, shared.word_embeddings.shape, "zeros")

    def token_table(self) -> tf.Tensor:
        """[V, E]: the table the discriminator reads."""
        return tf.stop_gradient(self.shared.word_embeddings) + self.word_embeddings_delta

    def __call__(self, input_ids, token_type_ids, *, training: bool, seeds, dtype=tf.float32,
                 inputs_embeds=None, packing=None):
        if inputs_embeds is None:
            # Two lookups rather than one of the summed table: the same values (an elementwise
            # sum), no [V, E] sum per step, and E_delta's gradient stays sparse.
            inputs_embeds = (tf.stop_gradient(tf.gather(self.shared.word_embeddings, input_ids))
                             + tf.gather(self.word_embeddings_delta, input_ids))
        return self.shared(input_ids, token_type_ids, training=training, seeds=seeds,
                           dtype=dtype, inputs_embeds=inputs_embeds, packing=packing)


def generator_embeddings(embeddings) -> modeling.Embeddings:
    """The module a generator shares with a discriminator whose embeddings are `embeddings`:
    that module itself (ES), or under GDES the one holding E_G."""
    if isinstance(embeddings, GradientDisentangledEmbeddings):
        return embeddings.shared
    return embeddings


def folded_table(generator_table: np.ndarray, delta: np.ndarray) -> np.ndarray:
    """E_G + E_delta in float32, the sum the discriminator computes (bit for bit)."""
    return np.add(np.asarray(generator_table, np.float32), np.asarray(delta, np.float32),
                  dtype=np.float32)


def fold(tensors: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Checkpoint tensors (name -> value) as a one-table discriminator reads them: under GDES
    `electra/embeddings/word_embeddings` becomes E_G + E_delta and the delta is dropped;
    anything else comes back unchanged."""
    out = dict(tensors)
    if DELTA in out:
        delta = out.pop(DELTA)
        out[TABLE] = folded_table(out[TABLE], delta)
    return out


def restore(variables: Mapping[str, tf.Variable], path: str,
            allow_missing: bool = False) -> checkpoint.RestoreReport:
    """checkpoint.restore for an encoder's variables (fine-tuning, probes, continued
    pre-training, scoring). A model with one discriminator table restored from a GDES
    checkpoint gets E_G + E_delta there; a GDES model restores both parts as they are."""
    report = checkpoint.restore(variables, path, allow_missing)
    if DELTA not in report.unused or TABLE not in variables:
        return report
    reader = checkpoint.load(report.path)
    variables[TABLE].assign(folded_table(reader.get_tensor(TABLE), reader.get_tensor(DELTA)))
    log.info("%s: a GDES checkpoint; %s = E_G + %s", report.path, TABLE, DELTA)
    return report._replace(unused=[n for n in report.unused if n != DELTA])
