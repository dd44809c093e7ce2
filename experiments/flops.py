"""FLOPs of one pre-training step, for comparing objectives at equal compute (Table 1, Figure 4).

Counting rules (the paper's Appendix D, simplified): a matmul of [m, k] x [k, n] costs 2mnk;
the backward pass of a trained network costs twice its forward pass (so a trained network costs
3x forward, a frozen one 1x); softmax, LayerNorm, GELU and embedding look-ups are not counted
(they are a few percent at these sizes).
"""
from configure_pretraining import PretrainingConfig
from model.modeling import BertConfig


def encoder_forward_flops(cfg: BertConfig, batch: int, seq: int) -> int:
    """Forward FLOPs of a BertModel encoder on [batch, seq] tokens (embeddings projection,
    attention projections, attention scores and mixing, feed-forward)."""
    tokens = batch * seq
    h, e, ffn = cfg.hidden_size, cfg.embedding_size, cfg.intermediate_size
    flops = 2 * tokens * e * h if e != h else 0  # embeddings_project
    per_layer = (4 * 2 * tokens * h * h  # query, key, value, output
                 + 2 * 2 * batch * seq * seq * h  # QK^T and attention x V
                 + 2 * 2 * tokens * h * ffn)  # intermediate and output dense
    return flops + cfg.num_hidden_layers * per_layer


def mlm_head_forward_flops(hidden: int, embedding: int, vocab: int, positions: int) -> int:
    """generator_predictions on `positions` vectors: dense H->E, then logits E->V."""
    return 2 * positions * hidden * embedding + 2 * positions * embedding * vocab


def pretrain_step_flops(config: PretrainingConfig) -> dict:
    """FLOPs of one optimizer step (forward + backward) of `config`'s objective.

    Returns {"generator": .., "discriminator": .., "total": ..}.
    """
    b, seq = config.train_batch_size, config.max_seq_length
    n = config.max_predictions_per_seq
    disc = config.bert_config()
    v, e = disc.vocab_size, disc.embedding_size
    objective = getattr(config, "objective", "electra" if config.electra_objective else "mlm")
    two_stage_frozen = getattr(config, "freeze_generator", False)
    if objective in ("mlm", "all_tokens_mlm"):
        predicted = b * (seq if objective == "all_tokens_mlm" else n)
        fwd = encoder_forward_flops(disc, b, seq) + mlm_head_forward_flops(
            disc.hidden_size, e, v, predicted)
        return {"generator": 0, "discriminator": 3 * fwd, "total": 3 * fwd}
    # Objectives with a discriminator: it reads every token, plus its dense -> 1 head.
    disc_fwd = encoder_forward_flops(disc, b, seq) + 2 * b * seq * disc.hidden_size * (
        disc.hidden_size + 1)
    gen_fwd = 0
    if not (config.uniform_generator or getattr(config, "unigram_generator", False)):
        same = not config.untied_generator or two_stage_frozen  # two-stage: D's shape
        gen = disc if same else config.generator_config()
        towers = 2 if config.two_tower_generator else 1
        gen_fwd = towers * encoder_forward_flops(gen, b, seq) + mlm_head_forward_flops(
            gen.hidden_size, gen.embedding_size if config.untied_generator_embeddings else e,
            v, b * n)
    gen_total = gen_fwd * (1 if two_stage_frozen else 3)
    return {"generator": gen_total, "discriminator": 3 * disc_fwd,
            "total": gen_total + 3 * disc_fwd}
