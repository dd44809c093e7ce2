"""The span-prediction head of ELECTRA's QA tasks (XLNet's joint start/end head).

Positions that may hold an answer: the document pieces and the final [SEP] (segment 1 inside
the mask) plus [CLS] (position 0, the "no answer in this window" target); the others get -1000
added to their logits.

joint_prediction (default, from XLNet):
  start logits   dense(H -> 1) on every position.
  end logits     conditioned on a start s: dense(512 -> 1)(gelu(dense(2H -> 512)(
                 [h_s ; h_e]))) for every end position e. Training uses the gold start;
                 inference keeps the `beam_size` best starts and, for each, the `beam_size` best
                 ends (log-probabilities), so the n-best search sees beam x beam spans.
otherwise        independent start and end logits (BERT).
answerable_classifier
  a logit for "this window holds no answer": dense(H -> 1) on [CLS], or with
  answerable_uses_start_logits dense(512 -> 1)(gelu(dense(2H -> 512)([h_CLS ; sum_i p_i h_i])))
  where p = softmax(start logits); trained with sigmoid cross-entropy against is_impossible,
  weight `answerable_weight`.
loss = (start NLL + end NLL) / 2 (+ weighted answerability loss).

Variables, under task_specific/<task>/ and named as the official TF1 `tf.layers.dense` calls
(unnamed layers are numbered in creation order):
  joint:      dense (start), qa_hidden (2H -> 512), dense_1 (end), answerability dense_2, dense_3
  not joint:  dense (start), dense_1 (end), answerability dense_2, dense_3
  (without answerable_uses_start_logits the answerability logit is the single layer dense_2.)

The joint end scorer applies qa_hidden's kernel as two halves, [h_s ; h_e] W = h_s W_top +
h_e W_bottom, so inference never materialises the [B, beam, L, 2H] concatenation (same math).
As the official head, it has no dropout, and at inference with joint_prediction its
`end_logits` output is zeros (the ends live in end_top_*). A batch cut to a length bucket
(finetune/bucketing.py) still gets max_seq_length-long start/end logits: the positions past its
length read -1000, as masked positions (n-best search skips both).
"""
from typing import Any

import tensorflow as tf

from finetune import heads
from model import layers
from model import modeling

QA_HIDDEN_SIZE = 512  # width of the joint end scorer and of the answerability MLP (official)
MASK_PENALTY = 1000.0  # subtracted from logits of positions that cannot hold an answer


class QAHead(heads.TaskHead):
    """Start/end/answerability logits and losses for one QA task (see the module docstring)."""

    def __init__(self, task_name: str, bert_config: modeling.BertConfig, *, beam_size: int,
                 max_seq_length: int | None = None, joint_prediction: bool = True, answerable_classifier: bool = True,
                 answerable_uses_start_logits: bool = True, answerable_weight: float = 0.5,
                 seed: int = 0):
        super().__init__(task_name, bert_config, seed)
        h = bert_config.hidden_size
        self.beam_size = beam_size
        # The length of the per-position outputs; batches may be shorter (length buckets,
        # finetune/bucketing.py) but never shorter than min(beam_size, max_seq_length).
        self.max_seq_length = max_seq_length
        self.joint_prediction = joint_prediction
        self.answerable_classifier = answerable_classifier
        self.answerable_uses_start_logits = answerable_uses_start_logits
        self.answerable_weight = answerable_weight
        numbered = iter(["dense"] + [f"dense_{i}" for i in range(1, 4)])

        def dense(in_dim, out_dim, name=None, activation=None):
            name = name or next(numbered)
            return heads.head_dense(in_dim, out_dim, f"{self.scope}/{name}", activation, seed)

        self.start_dense = dense(h, 1)
        if joint_prediction:
            self.qa_hidden = dense(2 * h, QA_HIDDEN_SIZE, name="qa_hidden", activation="gelu")
            self.end_dense = dense(QA_HIDDEN_SIZE, 1)
        else:
            self.end_dense = dense(h, 1)
        self.answerable_hidden = self.answerable_dense = None
        if answerable_classifier:
            if answerable_uses_start_logits:
                self.answerable_hidden = dense(2 * h, QA_HIDDEN_SIZE, activation="gelu")
                self.answerable_dense = dense(QA_HIDDEN_SIZE, 1)
            else:
                self.answerable_dense = dense(h, 1)

    def _joint_end_logits(self, start_vectors: tf.Tensor, hidden: tf.Tensor) -> tf.Tensor:
        """start_vectors: float32 [B, K, H] (K starts per row); hidden: [B, L, H] -> [B, K, L]."""
        h = hidden.shape[-1]
        kernel = self.qa_hidden.kernel
        from_start = tf.einsum("bkh,hd->bkd", start_vectors, kernel[:h])  # [B, K, 512]
        from_end = tf.einsum("blh,hd->bld", hidden, kernel[h:])  # [B, L, 512]
        pre = from_start[:, :, None, :] + from_end[:, None, :, :] + self.qa_hidden.bias
        return tf.squeeze(self.end_dense(layers.gelu(pre)), -1)  # [B, K, L]

    def __call__(self, encoder_output, features, *, training, seeds, percent_done
                 ) -> tuple[tf.Tensor, dict[str, Any]]:
        name = self.task_name
        hidden = tf.cast(encoder_output.sequence_output, tf.float32)  # [B, L, H]
        batch = tf.shape(hidden)[0]
        seq_len = tf.shape(hidden)[1]
        full_len = self.max_seq_length or hidden.shape[1]
        beam = min(self.beam_size, full_len)
        answer_mask = (tf.cast(features["input_mask"], tf.float32) *
                       tf.cast(features["segment_ids"], tf.float32) +
                       tf.one_hot(0, seq_len, dtype=tf.float32))  # [B, L]
        penalty = MASK_PENALTY * (answer_mask - 1.0)
        start_positions = features[f"{name}_start_positions"]  # [B]
        end_positions = features[f"{name}_end_positions"]

        start_logits = tf.squeeze(self.start_dense(hidden), -1) + penalty  # [B, L]
        start_top_log_probs = tf.zeros([batch, beam])
        start_top_index = tf.zeros([batch, beam], tf.int32)
        end_top_log_probs = tf.zeros([batch, beam, beam])
        end_top_index = tf.zeros([batch, beam, beam], tf.int32)
        if self.joint_prediction:
            if training:
                gold_start = tf.gather(hidden, start_positions, batch_dims=1)  # [B, H]
                end_logits = self._joint_end_logits(gold_start[:, None], hidden)[:, 0] + penalty
            else:
                start_top_log_probs, start_top_index = tf.math.top_k(
                    tf.nn.log_softmax(start_logits), k=beam)  # [B, K]
                starts = tf.gather(hidden, start_top_index, batch_dims=1)  # [B, K, H]
                beam_end_logits = self._joint_end_logits(starts, hidden) + penalty[:, None]
                end_top_log_probs, end_top_index = tf.math.top_k(
                    tf.nn.log_softmax(beam_end_logits), k=beam)  # [B, K, K]
                end_logits = None  # zeros over max_seq_length (as the official head)
        else:
            end_logits = tf.squeeze(self.end_dense(hidden), -1) + penalty

        def full_length(logits):  # positions past the batch's length: masked as padding is
            padded = tf.pad(logits, [[0, 0], [0, full_len - seq_len]],
                            constant_values=-MASK_PENALTY)
            return tf.reshape(padded, [-1, full_len])

        def nll(logits, positions):
            return -tf.reduce_sum(tf.one_hot(positions, full_len, dtype=tf.float32) *
                                  tf.nn.log_softmax(logits), axis=-1)

        # Losses and outputs over max_seq_length: the same values for a batch of any length.
        full_start_logits = full_length(start_logits)
        end_logits = (tf.zeros_like(full_start_logits) if end_logits is None
                      else full_length(end_logits))
        losses = (nll(full_start_logits, start_positions) + nll(end_logits, end_positions)) / 2.0
        answerable_logit = tf.zeros([batch])
        if self.answerable_classifier:
            reprs = hidden[:, 0]  # [CLS]
            if self.answerable_uses_start_logits:
                start_probs = tf.nn.softmax(start_logits)  # [B, L]
                start_summary = tf.einsum("bl,blh->bh", start_probs, hidden)
                reprs = self.answerable_hidden(tf.concat([reprs, start_summary], -1))
            answerable_logit = tf.squeeze(self.answerable_dense(reprs), -1)  # [B]
            labels = tf.cast(features[f"{name}_is_impossible"], tf.float32)
            losses += self.answerable_weight * tf.nn.sigmoid_cross_entropy_with_logits(
                labels=labels, logits=answerable_logit)

        outputs = dict(loss=losses, eid=features[f"{name}_eid"], start_logits=full_start_logits,
                       end_logits=end_logits, answerable_logit=answerable_logit,
                       start_top_log_probs=start_top_log_probs, start_top_index=start_top_index,
                       end_top_log_probs=end_top_log_probs, end_top_index=end_top_index)
        return losses, outputs
