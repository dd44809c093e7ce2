"""A fine-tuned model for serving: rebuilt from a trial directory, with a SavedModel signature.

The serving signature (`serving_default`, also the module's `serve` function):

  inputs   input_ids    int32 [batch, L]   WordPiece ids: [CLS] a [SEP] (b [SEP]) + padding
           input_mask   int32 [batch, L]   1 for real tokens, 0 for padding
           segment_ids  int32 [batch, L]   0 for the first segment, 1 for the second
  outputs  each task head's outputs except its loss, example ids and label echoes, plus
           `probabilities` (softmax over the last axis) wherever a head has `logits`. With one
           task the keys are bare (`logits`, `probabilities`, `predictions`); with several they
           are `<task>_<output>`. A GLUE classifier gives logits/probabilities float32
           [batch, num_labels], predictions int32 [batch] and `label` string [batch] (the
           predicted label's name); a regression task (STS-B) predictions float32 [batch] on
           the training scale ((score - lo) / scale) and `score` float32 [batch] in the task's
           own units (score = predictions * scale + lo); a tagger (chunk) predictions int32
           [batch, L] and `tags` string [batch, L]; a QA head its start/end scores over the L
           positions. The module also keeps, per task, `label_names` (the label list, in the
           order of the logits) or `score_range` ([lo, hi, scale]) as variables: after
           tf.saved_model.load, `loaded.label_names["<task>"]`.

L is the trial's max_seq_length, fixed (pad every row to it, as fine-tuning's featurization
does): some heads (QA's beam over start positions) need a static length. A tagger's position
list (`<task>_labeled_positions`, the first piece of each word in training) becomes every
position 0..L-1, so it predicts a label for every token; read a word's at its first piece. The
other task features only feed the losses; the signature fills them with zeros.
"""
import logging
from typing import Sequence

import tensorflow as tf

import configure_finetuning
from finetune import finetuning_model
from finetune import task as task_lib
from finetune import task_builder
from finetune.classification import classification_tasks
from finetune.qa import qa_tasks
from model import model_dir as model_dir_lib
from model import tokenization
from util import checkpoint

log = logging.getLogger(__name__)

INPUTS = ("input_ids", "input_mask", "segment_ids")
# Head outputs that only make sense with labels.
DROPPED_OUTPUTS = ("loss", "eid")
# Task features that select token positions rather than carry labels (tagging heads).
POSITION_FEATURE_SUFFIX = "_labeled_positions"


def load_finetuned(md: model_dir_lib.ModelDir, remove_padding: bool | None = None):
    """(config, tasks, model with the trial's weights) for a fine-tuning trial directory;
    `remove_padding` None follows the trial's config (FinetuningModel).

    Raises:
      ValueError: not a trial directory, no vocabulary, or weights that do not fit.
    """
    if md.kind != "finetuned":
        raise ValueError(f"{md.path} is not a fine-tuning trial directory (no "
                         f"{model_dir_lib.FINETUNE_CONFIG_FILE})")
    if md.vocab_file is None:
        raise ValueError(f"no vocab.txt found for {md.path} (looked in it and in the pre-trained "
                         "model dir two levels up); pass --vocab-file")
    settings = dict(md.settings)
    settings.update(vocab_file=md.vocab_file, init_checkpoint="", do_train=False)
    config = configure_finetuning.FinetuningConfig.from_hparams(
        settings.get("model_name", "exported"), settings.get("data_dir", md.path), settings)
    vocab = ({"spm_model": md.vocab_file} if md.vocab_file.endswith(".model")
             else {"vocab_file": md.vocab_file})
    tokenizer = tokenization.build_tokenizer(**vocab, do_lower_case=config.do_lower_case)
    tasks = task_builder.get_tasks(config, tokenizer)
    model = finetuning_model.FinetuningModel(config, tasks, bert_config=md.bert_config,
                                             remove_padding=remove_padding)
    variables = checkpoint.by_name(model.variables)
    report = md.read_checkpoint(lambda prefix: checkpoint.restore(variables, prefix))
    log.info("restored %d variables from %s (%d others, e.g. optimizer slots, ignored)",
             len(report.restored), report.path, len(report.unused))
    return config, tasks, model


def _serving_feature(spec, batch_size):
    """Every position for a position list, zeros for anything else (labels, ids, masks)."""
    shape = [int(d) for d in spec.shape]
    if spec.name.endswith(POSITION_FEATURE_SUFFIX) and len(shape) == 1:
        return tf.tile(tf.range(shape[0], dtype=tf.int32)[tf.newaxis], [batch_size, 1])
    dtype = tf.int32 if spec.is_int_feature else tf.float32
    return tf.zeros(tf.stack([batch_size] + shape), dtype)


def _has_label_names(task: task_lib.Task) -> bool:
    """Classifiers and taggers: their predictions index `label_list`."""
    return (hasattr(task, "label_list") and not isinstance(task, qa_tasks.QATask)
            and not isinstance(task, classification_tasks.RegressionTask))


class ServingModule(tf.Module):
    """Wraps a FinetuningModel; `serve(input_ids, input_mask, segment_ids)` -> {name: tensor}."""

    def __init__(self, model: finetuning_model.FinetuningModel, tasks: Sequence[task_lib.Task],
                 max_seq_length: int):
        super().__init__(name="electra_serving")
        self.model = model
        self._specs = [spec for t in tasks for spec in t.get_feature_specs()]
        self._task_names = [t.name for t in tasks]
        # What a reader needs to read the outputs, saved with the model (see the docstring).
        self.label_names = {t.name: tf.Variable(list(t.label_list), trainable=False)
                            for t in tasks if _has_label_names(t)}
        self.score_range = {
            t.name: tf.Variable([t.min_value, t.max_value, t.scale], dtype=tf.float32,
                                trainable=False)
            for t in tasks if isinstance(t, classification_tasks.RegressionTask)}
        self.max_seq_length = max_seq_length
        spec = tf.TensorSpec([None, max_seq_length], tf.int32)
        self.serve = tf.function(self._serve, input_signature=[
            tf.TensorSpec.from_spec(spec, name=n) for n in INPUTS], autograph=False)

    def _serve(self, input_ids, input_mask, segment_ids):
        batch_size = tf.shape(input_ids)[0]
        features = {"input_ids": input_ids, "input_mask": input_mask, "segment_ids": segment_ids,
                    "task_id": tf.zeros([batch_size], tf.int32)}
        for spec in self._specs:
            features[spec.name] = _serving_feature(spec, batch_size)
        _, outputs = self.model(features, training=False)
        feature_names = {s.name for s in self._specs}
        result = {}
        for task in self._task_names:
            for key, value in outputs[task].items():
                if key in DROPPED_OUTPUTS or f"{task}_{key}" in feature_names:
                    continue
                result[self._key(task, key)] = value
                if key == "logits":
                    result[self._key(task, "probabilities")] = tf.nn.softmax(value, axis=-1)
            predictions = outputs[task].get("predictions")
            if task in self.label_names and predictions is not None:
                name = "label" if predictions.shape.rank == 1 else "tags"
                result[self._key(task, name)] = tf.gather(self.label_names[task], predictions)
            if task in self.score_range and predictions is not None:
                lo, scale = self.score_range[task][0], self.score_range[task][2]
                result[self._key(task, "score")] = predictions * scale + lo
        return result

    def _key(self, task: str, output: str) -> str:
        return output if len(self._task_names) == 1 else f"{task}_{output}"
