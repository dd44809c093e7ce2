"""The official release's training step written out with plain TensorFlow ops, for the tests.

Written from google-research/electra (model/modeling.py, model/optimization.py,
run_pretraining.py, pretrain/pretrain_helpers.py, finetune/classification, finetune/tagging,
finetune/qa) and nothing of this project: no import from model/, pretrain/ or finetune/. Weights
are a dict from official variable name (e.g. "electra/encoder/layer_0/attention/self/query/kernel")
to a float32 tensor or variable; every function here is a formula of the release:

  encoder         modeling.BertModel: embeddings + LayerNorm, `embeddings_project` when the
                  embedding size differs from the hidden size, post-LN layers, erf GELU,
                  attention adder -10000 at padding, LayerNorm epsilon 1e-12, no dropout;
  pretraining     run_pretraining.PretrainingModel: the masked LM at the masked positions,
                  the corrupted input (pretrain_helpers.unmask / scatter_update), labels
                  (a sample equal to the original is not replaced), the discriminator, and
                  loss = gen_weight * mlm + disc_weight * disc; with weights holding
                  `electra/embeddings/word_embeddings_delta`, the discriminator reads
                  stop_gradient(E_G) + E_delta (DeBERTa-v3's GDES, He, Gao, Chen 2023; not
                  in the release);
  finetuning      run_finetuning.FinetuningModel with the classification, tagging and QA
                  (SQuAD 2.0: joint prediction, answerability classifier) prediction modules;
  optimizer_step  optimization.create_optimizer: clip_by_global_norm(1.0), the polynomial decay
                  with warm-up multiplied on, layer-wise rates (_get_layer_lrs) and
                  AdamWeightDecayOptimizer; `bias_correction` adds standard Adam's correction
                  (this project's option, not in the release).
"""
import math
import re

import tensorflow as tf

LAYER_NORM_EPSILON = 1e-12  # tf.contrib.layers.layer_norm's default, used by modeling.layer_norm
ATTENTION_ADDER = -10000.0
GEN_WEIGHT, DISC_WEIGHT = 1.0, 50.0  # configure_pretraining.py
ADAM_BETA_1, ADAM_BETA_2, ADAM_EPSILON = 0.9, 0.999, 1e-6
EXCLUDE_FROM_WEIGHT_DECAY = ("LayerNorm", "layer_norm", "bias")
CLIP_NORM = 1.0
QA_ANSWERABLE_WEIGHT = 0.5
QA_MASK_PENALTY = 1000.0


# -- modeling.py ----------------------------------------------------------------------------------

def gelu(x):
    return x * (0.5 * (1.0 + tf.math.erf(x / tf.sqrt(2.0))))


def layer_norm(x, w, scope):
    mean, variance = tf.nn.moments(x, [-1], keepdims=True)
    return tf.nn.batch_normalization(x, mean, variance, offset=w[f"{scope}/beta"],
                                     scale=w[f"{scope}/gamma"],
                                     variance_epsilon=LAYER_NORM_EPSILON)


def dense(x, w, scope, activation=None):
    y = tf.tensordot(x, w[f"{scope}/kernel"], axes=1) + w[f"{scope}/bias"]
    return activation(y) if activation is not None else y


def num_layers(w, scope):
    return len({name.split("/")[2] for name in w if name.startswith(f"{scope}/encoder/layer_")})


def encoder(w, scope, input_ids, input_mask, segment_ids, num_heads, embedding_scope="electra"):
    """modeling.BertModel(is_training=False) -> sequence output [B, L, H]."""
    emb = f"{embedding_scope}/embeddings"
    length = input_ids.shape[1]
    x = tf.gather(w[f"{emb}/word_embeddings"], input_ids)
    types = w[f"{emb}/token_type_embeddings"]
    x += tf.tensordot(tf.one_hot(segment_ids, types.shape[0]), types, axes=1)
    x += w[f"{emb}/position_embeddings"][tf.newaxis, :length]
    x = layer_norm(x, w, f"{emb}/LayerNorm")
    if f"{scope}/embeddings_project/kernel" in w:
        x = dense(x, w, f"{scope}/embeddings_project")
    batch, hidden = x.shape[0], x.shape[2]
    size = hidden // num_heads
    adder = (1.0 - tf.cast(input_mask, tf.float32))[:, tf.newaxis, tf.newaxis, :] * ATTENTION_ADDER

    def heads(t):
        return tf.transpose(tf.reshape(t, [batch, length, num_heads, size]), [0, 2, 1, 3])

    for i in range(num_layers(w, scope)):
        p = f"{scope}/encoder/layer_{i}"
        q = heads(dense(x, w, f"{p}/attention/self/query"))
        k = heads(dense(x, w, f"{p}/attention/self/key"))
        v = heads(dense(x, w, f"{p}/attention/self/value"))
        scores = tf.matmul(q, k, transpose_b=True) * (1.0 / math.sqrt(float(size))) + adder
        context = tf.reshape(tf.transpose(tf.matmul(tf.nn.softmax(scores), v), [0, 2, 1, 3]),
                             [batch, length, hidden])
        x = layer_norm(dense(context, w, f"{p}/attention/output/dense") + x, w,
                       f"{p}/attention/output/LayerNorm")
        ffn = dense(dense(x, w, f"{p}/intermediate/dense", gelu), w, f"{p}/output/dense")
        x = layer_norm(ffn + x, w, f"{p}/output/LayerNorm")
    return x


# -- pretrain_helpers.py --------------------------------------------------------------------------

def scatter_update(sequence, updates, positions):
    """int sequence [B, L], updates [B, N] at positions [B, N]: position 0 is never written,
    a position named twice gets the floor of its updates' mean; -> (updated, written mask)."""
    length = sequence.shape[1]
    one_hot = tf.one_hot(positions, length, dtype=tf.int32)  # [B, N, L]
    counts = tf.reduce_sum(one_hot, 1) * tf.concat(
        [tf.zeros_like(sequence[:, :1]), tf.ones_like(sequence[:, 1:])], 1)
    summed = tf.reduce_sum(one_hot * updates[:, :, tf.newaxis], 1) // tf.maximum(1, counts)
    written = tf.minimum(counts, 1)
    return (1 - written) * sequence + written * summed, written


# -- run_pretraining.py ---------------------------------------------------------------------------

def masked_lm(w, hidden, masked):
    """get_token_logits + get_softmax_output at the masked positions -> (loss, logits)."""
    relevant = tf.gather(hidden, masked["masked_lm_positions"], batch_dims=1)
    h = layer_norm(dense(relevant, w, "generator_predictions/dense", gelu), w,
                   "generator_predictions/LayerNorm")
    table = w["electra/embeddings/word_embeddings"]
    logits = tf.tensordot(h, tf.transpose(table), axes=1) + w["generator_predictions/output_bias"]
    labels = tf.one_hot(masked["masked_lm_ids"], table.shape[0])
    label_log_probs = -tf.reduce_sum(tf.nn.log_softmax(logits) * labels, -1)
    weights = masked["masked_lm_weights"]
    return tf.reduce_sum(weights * label_log_probs) / (tf.reduce_sum(weights) + 1e-6), logits


def discriminator_weights(w):
    """The weights the discriminator reads: under GDES its token table is
    stop_gradient(E_G) + E_delta, E_G the (generator's) `electra/embeddings/word_embeddings`."""
    table = "electra/embeddings/word_embeddings"
    if f"{table}_delta" not in w:
        return w
    return dict(w, **{table: tf.stop_gradient(w[table]) + w[f"{table}_delta"]})


def sample_from_softmax(logits, uniform_noise, temperature=1.0):
    """pretrain_helpers.sample_from_softmax with its uniform noise given: Gumbel-max."""
    gumbel = -tf.math.log(-tf.math.log(uniform_noise + 1e-9) + 1e-9)
    return tf.argmax(tf.nn.softmax(logits / temperature + gumbel), -1, output_type=tf.int32)


def pretraining(w, masked, *, disc_heads, gen_heads, sampled=None, uniform_noise=None,
                gen_weight=GEN_WEIGHT, disc_weight=DISC_WEIGHT):
    """The ELECTRA or BERT (neither `sampled` nor `uniform_noise`) loss of one batch.

    masked: input_ids (with [MASK]), input_mask, segment_ids, masked_lm_positions,
    masked_lm_ids, masked_lm_weights; sampled: int [B, N] the generator's samples, or
    uniform_noise: float [B, N, V], the noise they are drawn with from this generator.
    Returns dict total, mlm, disc (None for BERT), labels (the discriminator's, or None).
    """
    inputs = (masked["input_mask"], masked["segment_ids"])
    if any(name.startswith("generator/") for name in w):  # separate small generator
        gen_hidden = encoder(w, "generator", masked["input_ids"], *inputs, gen_heads)
    else:  # BERT, or a generator tied to the discriminator
        gen_hidden = encoder(w, "electra", masked["input_ids"], *inputs, disc_heads)
    mlm, logits = masked_lm(w, gen_hidden, masked)
    if sampled is None and uniform_noise is None:
        return dict(total=gen_weight * mlm, mlm=mlm, disc=None, labels=None)
    if sampled is None:
        sampled = sample_from_softmax(tf.stop_gradient(logits), uniform_noise)
    positions = masked["masked_lm_positions"]
    original, _ = scatter_update(masked["input_ids"], masked["masked_lm_ids"], positions)
    fake, written = scatter_update(original, sampled, positions)
    labels = written * (1 - tf.cast(tf.equal(fake, original), tf.int32))
    hidden = encoder(discriminator_weights(w), "electra", fake, *inputs, disc_heads)
    h = dense(hidden, w, "discriminator_predictions/dense", gelu)
    logits = tf.squeeze(dense(h, w, "discriminator_predictions/dense_1"), -1)
    weights = tf.cast(masked["input_mask"], tf.float32)
    losses = tf.nn.sigmoid_cross_entropy_with_logits(
        logits=logits, labels=tf.cast(labels, tf.float32)) * weights
    disc = tf.reduce_sum(losses) / (1e-6 + tf.reduce_sum(weights))
    return dict(total=gen_weight * mlm + disc_weight * disc, mlm=mlm, disc=disc, labels=labels)


# -- finetune/*: the prediction modules and run_finetuning.FinetuningModel -------------------------

def classification(w, hidden, features, task):
    logits = dense(hidden[:, 0], w, f"task_specific/{task}/dense")
    labels = tf.one_hot(features[f"{task}_label_ids"], logits.shape[-1])
    return -tf.reduce_sum(labels * tf.nn.log_softmax(logits), -1), dict(logits=logits)


def tagging(w, hidden, features, task):
    reprs = tf.gather(hidden, features[f"{task}_labeled_positions"], batch_dims=1)
    logits = dense(reprs, w, f"task_specific/{task}/dense")
    losses = tf.nn.softmax_cross_entropy_with_logits(
        labels=tf.one_hot(features[f"{task}_labels"], logits.shape[-1]), logits=logits)
    return tf.reduce_sum(losses * features[f"{task}_labels_mask"], -1), dict(logits=logits)


def squad(w, hidden, features, task, *, training, beam_size):
    """QATask with joint_prediction, answerable_classifier and answerable_uses_start_logits."""
    s = f"task_specific/{task}"
    length = hidden.shape[1]
    answer_mask = tf.cast(features["input_mask"], tf.float32)
    answer_mask *= tf.cast(features["segment_ids"], tf.float32)
    answer_mask += tf.one_hot(0, length)
    start_logits = tf.squeeze(dense(hidden, w, f"{s}/dense"), -1)
    start_logits += QA_MASK_PENALTY * (answer_mask - 1)
    start_log_probs = tf.nn.log_softmax(start_logits)
    start_top_log_probs, start_top_index = tf.nn.top_k(start_log_probs, k=beam_size)
    outputs = {}
    if training:
        start_index = tf.one_hot(features[f"{task}_start_positions"], length)
        start_features = tf.reduce_sum(start_index[:, :, tf.newaxis] * hidden, 1)
        start_features = tf.tile(start_features[:, tf.newaxis], [1, length, 1])
        end_features = hidden
    else:
        end_features = tf.tile(hidden[:, tf.newaxis], [1, beam_size, 1, 1])
        start_index = tf.one_hot(start_top_index, length)
        start_features = tf.reduce_sum(hidden[:, tf.newaxis] * start_index[..., tf.newaxis], -2)
        start_features = tf.tile(start_features[:, :, tf.newaxis], [1, 1, length, 1])
    final_repr = dense(tf.concat([start_features, end_features], -1), w, f"{s}/qa_hidden", gelu)
    end_logits = tf.squeeze(dense(final_repr, w, f"{s}/dense_1"), -1)
    if training:
        end_logits += QA_MASK_PENALTY * (answer_mask - 1)
    else:
        end_logits += QA_MASK_PENALTY * (answer_mask - 1)[:, tf.newaxis]
        end_top_log_probs, end_top_index = tf.nn.top_k(tf.nn.log_softmax(end_logits), k=beam_size)
        outputs.update(start_top_log_probs=start_top_log_probs, start_top_index=start_top_index,
                       end_top_log_probs=end_top_log_probs, end_top_index=end_top_index)
        end_logits = tf.zeros_like(start_logits)

    def nll(logits, positions):
        return -tf.reduce_sum(tf.one_hot(positions, length) * tf.nn.log_softmax(logits), -1)

    losses = (nll(start_logits, features[f"{task}_start_positions"])
              + nll(end_logits, features[f"{task}_end_positions"])) / 2.0
    start_feature = tf.reduce_sum(tf.nn.softmax(start_logits)[..., tf.newaxis] * hidden, 1)
    cls = dense(tf.concat([hidden[:, 0], start_feature], -1), w, f"{s}/dense_2", gelu)
    answerable_logit = tf.squeeze(dense(cls, w, f"{s}/dense_3"), -1)
    losses += QA_ANSWERABLE_WEIGHT * tf.nn.sigmoid_cross_entropy_with_logits(
        labels=tf.cast(features[f"{task}_is_impossible"], tf.float32), logits=answerable_logit)
    outputs.update(start_logits=start_logits, answerable_logit=answerable_logit)
    return losses, outputs


def finetuning(w, features, tasks, *, num_heads, training, beam_size):
    """tasks: [(name, kind)] with kind "classification", "tagging" or "squad", in task_id order.
    Returns (loss: the sum over rows of each row's own-task loss, {task: (losses, outputs)})."""
    hidden = encoder(w, "electra", features["input_ids"], features["input_mask"],
                     features["segment_ids"], num_heads)
    per_task = {}
    for name, kind in tasks:
        if kind == "squad":
            per_task[name] = squad(w, hidden, features, name, training=training,
                                   beam_size=beam_size)
        else:
            per_task[name] = {"classification": classification, "tagging": tagging}[kind](
                w, hidden, features, name)
    losses = tf.stack([per_task[name][0] for name, _ in tasks], -1)
    loss = tf.reduce_sum(losses * tf.one_hot(features["task_id"], len(tasks)))
    return loss, per_task


# -- optimization.py ------------------------------------------------------------------------------

def learning_rate(step, peak, num_train_steps, warmup_steps, power=1.0):
    """tf.train.polynomial_decay to 0, times min(1, step / warmup_steps)."""
    decayed = peak * (1.0 - min(step, num_train_steps) / num_train_steps) ** power
    return decayed * min(1.0, step / warmup_steps)


def layer_depth_rates(rate, decay, n_layers):
    """_get_layer_lrs: name substring -> rate * decay^(n_layers + 2 - depth)."""
    depths = {"/embeddings/": 0, "/embeddings_project/": 0, "task_specific/": n_layers + 2}
    for layer in range(n_layers):
        depths[f"encoder/layer_{layer}/"] = layer + 1
    return {key: rate * decay ** (n_layers + 2 - depth) for key, depth in depths.items()}


def optimizer_step(w, slots, grads, rate, *, weight_decay_rate, step, bias_correction=False):
    """Clips `grads` (name -> dense gradient) at global norm 1 and applies AdamWeightDecay to `w`
    (name -> tf.Variable) in place; `slots` name -> [m, v] tensors, updated; `rate` a float or
    a {substring: rate} dict (layer-wise). Returns the global norm before clipping."""
    names = sorted(grads)
    clipped, norm = tf.clip_by_global_norm([grads[n] for n in names], CLIP_NORM)
    for name, grad in zip(names, clipped):
        param = w[name]
        m, v = slots.setdefault(name, [tf.zeros_like(param), tf.zeros_like(param)])
        next_m = ADAM_BETA_1 * m + (1.0 - ADAM_BETA_1) * grad
        next_v = ADAM_BETA_2 * v + (1.0 - ADAM_BETA_2) * tf.square(grad)
        if bias_correction:  # 1 - beta^t in float32, as TensorFlow's own Adam computes it
            t = tf.constant(step + 1, tf.float32)
            update = ((next_m / (1.0 - tf.pow(ADAM_BETA_1, t)))
                      / (tf.sqrt(next_v / (1.0 - tf.pow(ADAM_BETA_2, t))) + ADAM_EPSILON))
        else:
            update = next_m / (tf.sqrt(next_v) + ADAM_EPSILON)
        if weight_decay_rate and not any(re.search(r, name) for r in EXCLUDE_FROM_WEIGHT_DECAY):
            update += weight_decay_rate * param
        if isinstance(rate, dict):
            keys = [key for key in rate if key in name]
            if len(keys) != 1:
                raise ValueError(f"no single layer-wise rate for {name}: {keys}")
            var_rate = rate[keys[0]]
        else:
            var_rate = rate
        param.assign(param - var_rate * update)
        slots[name] = [next_m, next_v]
    return norm
