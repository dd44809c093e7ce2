"""The pre-training objectives of the paper, one piece each, with one signature:

    objective(step: base.Step) -> base.PretrainingOutput

The ELECTRA step (pretrain/pretraining_model.py) masks, runs the generator and, for objectives
that read its samples (`reads_samples`), samples, corrupts and runs the discriminator encoder;
the objective turns that into losses.

- masked_lm.MaskedLanguageModel: BERT (electra_objective false);
- replaced_token_detection.ReplacedTokenDetection: ELECTRA, and ELECTRA 15%, the adversarial
  generator, Electric and two-stage training;
- replaced_mlm.ReplacedMaskedLM: Replace MLM and All-Tokens MLM.

Which generator fills the masks (masked LM, two-tower cloze, unigram, uniform) is chosen apart,
in pretrain/generators.py; `functions` holds the math these pieces share.
"""
from configure_pretraining import PretrainingConfig
from model import modeling
from pretrain import masking
from pretrain.objectives.masked_lm import MaskedLanguageModel
from pretrain.objectives.replaced_mlm import ReplacedMaskedLM
from pretrain.objectives.replaced_token_detection import ReplacedTokenDetection


def build_objective(config: PretrainingConfig, discriminator: modeling.BertModel,
                    generator_config: modeling.BertConfig | None,
                    special_ids: masking.SpecialIds, seed: int):
    """The objective piece `config` asks for."""
    if config.replace_mlm or config.all_tokens_mlm:
        return ReplacedMaskedLM(config, discriminator.config, discriminator.embeddings,
                                special_ids, seed)
    if config.electra_objective or config.electric_objective:
        return ReplacedTokenDetection(config, discriminator.config, generator_config,
                                      special_ids, seed)
    return MaskedLanguageModel(config.gen_weight)
