"""Fine-tuning hyperparameters. Names and defaults follow the official ELECTRA release and Table 7.

`FinetuningConfig.from_hparams(model_name, data_dir, hparams)`: defaults, the user's hparams, what
they imply (per-task epochs and lengths, per-size learning rate and layer-wise decay, debug mode,
paths), then the user's hparams again so they always win.
"""
import dataclasses
import os
from typing import Any

from model import modeling, pretrained_vocab, tokenization
from util import fs, task_spec
from util.distribution import STRATEGIES
from util.hparams import (AT_LEAST_ONE, NON_NEGATIVE, POSITIVE, PROBABILITY, SEED, HParamError,
                          HParams, OneOf, Range, hp)

# Table 7: learning rate and layer-wise decay per model size; small also uses embedding size 128.
# The release's configure_finetuning.py gives small 1e-4 (docs/FIDELITY.md).
SIZE_DEFAULTS = {
    "small": dict(learning_rate=3e-4, layerwise_lr_decay=0.8, embedding_size=128),
    "base": dict(learning_rate=1e-4, layerwise_lr_decay=0.8),
    "large": dict(learning_rate=5e-5, layerwise_lr_decay=0.9),
}
QA_TASKS = ("squad", "squadv1", "newsqa", "naturalqs", "triviaqa", "searchqa", "hotpotqa",
            "textbookqa", "bioasq", "drop", "duorc", "race", "relationextraction")


@dataclasses.dataclass
class FinetuningConfig(HParams):
    model_name: str = hp("", "name of the pre-trained model under <data_dir>/models/")
    data_dir: str = hp("", "directory holding finetuning_data/<task>/ and models/")
    debug: bool = hp(False, "quick run: random init, 1 trial, no tfrecord cache")
    log_examples: bool = hp(False, "print a few featurized training examples")
    num_trials: int = hp(1, "train+eval runs with different seeds; each reported and the median",
                         valid=AT_LEAST_ONE)
    do_train: bool = hp(True, "train a model")
    do_eval: bool = hp(True, "evaluate on the dev set")
    keep_all_models: bool = hp(True, "false: keep only the last trial's checkpoint")
    seed: int = hp(0, "base seed; trial t uses seed + t",
                   valid=SEED)

    # model
    model_size: str = hp("small", "one of small, base, large",
                         valid=OneOf(tuple(SIZE_DEFAULTS)))
    task_names: list[str] = hp(["chunk"], "tasks to learn, e.g. [\"sst\"] or [\"mnli\", \"rte\"]")
    custom_tasks: dict = hp({}, "tasks defined by your data files: name -> spec (a JSON object or a .json file; README \"Fine-tune on your own data\", util/task_spec.py); list the names in task_names")
    model_hparam_overrides: dict = hp({}, "bert_config keys that override the model size's architecture")
    embedding_size: int | None = hp(None, "token embedding size (hidden size by default; 128 for small)",
                                    valid=AT_LEAST_ONE)
    vocab_size: int = hp(30522, "number of tokens in the vocabulary",
                         valid=AT_LEAST_ONE)
    do_lower_case: bool | None = hp(None, "lower-case the input text; null: as the pre-trained model was (its pretrain_config.json), else true (the uncased releases)")
    compute_dtype: str = hp("float32", "float32, bfloat16 or float16 compute (weights stay float32)",
                            valid=OneOf(tuple(sorted(modeling.COMPUTE_DTYPES))))
    use_xla: bool | None = hp(None, "compile the train step with XLA; null: on for GPU/TPU, off on CPU")
    strategy: str = hp("default", "default (one device), mirrored (local GPUs), multi_worker, tpu",
                       valid=OneOf(STRATEGIES))

    # training
    learning_rate: float = hp(1e-4, "peak learning rate (Table 7: 3e-4 small, 1e-4 base, 5e-5 large; the release: 1e-4, 5e-5 large)",
                              valid=POSITIVE)
    weight_decay_rate: float = hp(0.01, "decoupled weight decay (the release's 0.01; Table 7: 0)",
                                  valid=NON_NEGATIVE)
    layerwise_lr_decay: float = hp(0.8, "layer-wise learning-rate decay (0.8 small/base, 0.9 large); 0 disables",
                                   valid=PROBABILITY)
    layerwise_lr_decay_official: bool = hp(True, "true reproduces the official depth mapping (exponent off by one); false corrects it")
    adam_bias_correction: bool = hp(False, "true: Adam with bias correction; false reproduces the official update")
    lr_decay_after_warmup: bool = hp(False, "true: decay starts after warm-up; false reproduces the official schedule")
    num_train_epochs: float = hp(3.0, "passes over the training set (10 for rte/sts, 2 for QA)",
                                 valid=POSITIVE)
    warmup_proportion: float = hp(0.1, "fraction of training spent warming up the learning rate",
                                  valid=PROBABILITY)
    clip_norm: float = hp(1.0, "global-norm gradient clipping",
                          valid=POSITIVE)
    clip_per_replica: bool = hp(False, "true: the official TPU rule (CrossShardOptimizer): each replica's loss over its own examples, its gradient clipped at clip_norm, the clipped gradients summed; false: the global batch's gradient clipped once, the same for any number of replicas (docs/FIDELITY.md)")
    save_checkpoints_steps: int = hp(1000000, "checkpoint a trial every this many steps",
                                     valid=AT_LEAST_ONE)
    save_checkpoints_secs: float = hp(0.0, "also checkpoint when this many seconds have passed since the last save, at the next step boundary (0: by steps only); bounds the work a crash loses in minutes (SIGTERM/SIGINT always save: exit status 75)",
                                      valid=NON_NEGATIVE)
    iterations_per_loop: int = hp(1000, "steps per host loop",
                                  valid=AT_LEAST_ONE)
    use_tfrecords_if_existing: bool = hp(True, "reuse cached featurized tfrecords when their key matches")
    max_train_examples: int | None = hp(None, "use only the first N training examples (quick runs)",
                                        valid=AT_LEAST_ONE)
    max_eval_examples: int | None = hp(None, "evaluate on only the first N dev examples (quick runs)",
                                       valid=AT_LEAST_ONE)
    tagging_label_encoding: str = hp("BIOES", "labels that chunk (span) tags train on: BIOES (B-, I-, E-, S-<type> and O, as the official release) or IOB2 (B-, I-<type> and O: half as many classes, the Hugging Face token-classification recipe's); predictions are scored as IOB2 either way",
                                     valid=OneOf(("BIOES", "IOB2")))
    heldout_dev_sentences: int = hp(1000, "tagging tasks without dev.txt (chunk): the last N train.txt sentences are held out as the dev set",
                                    valid=NON_NEGATIVE)

    # writing model outputs to disk
    write_test_outputs: bool = hp(False, "write test-set predictions (GLUE TSVs, SQuAD json)")
    n_writes_test: int = hp(5, "write test predictions for the first n trials",
                            valid=NON_NEGATIVE)

    # sizing
    max_seq_length: int = hp(128, "tokens per example (512 for QA, 256 for chunk)",
                             valid=Range(3))
    pad_to_multiple_of: int = hp(16, "pad each batch only to its longest example rounded up to a multiple of this (capped at max_seq_length), so a step sees a few lengths instead of always max_seq_length (use_xla compiles each length once: a larger multiple, fewer compiles); 0: pad every batch to max_seq_length, as the official release (docs/FIDELITY.md)",
                                 valid=NON_NEGATIVE)
    remove_padding: bool = hp(True, "outside XLA, run the encoder's per-token work (projections, FFN, LayerNorm) on each batch's real tokens only, padding removed between the attentions: the same numbers up to float rounding (docs/FIDELITY.md); use_xla keeps the padded layout (static shapes), as do exported SavedModels")
    train_batch_size: int = hp(32, "global training batch size",
                               valid=AT_LEAST_ONE)
    eval_batch_size: int = hp(32, "evaluation batch size",
                              valid=AT_LEAST_ONE)
    predict_batch_size: int = hp(32, "prediction batch size",
                                 valid=AT_LEAST_ONE)
    double_unordered: bool = hp(True, "train mrpc and sts on both sentence orders (as the official release)")

    # question answering
    max_query_length: int = hp(64, "max question tokens",
                               valid=AT_LEAST_ONE)
    doc_stride: int = hp(128, "stride between document windows",
                         valid=AT_LEAST_ONE)
    n_best_size: int = hp(20, "candidate answers kept per question",
                          valid=AT_LEAST_ONE)
    max_answer_length: int = hp(30, "longest answer in tokens",
                                valid=AT_LEAST_ONE)
    answerable_classifier: bool = hp(True, "answerability classifier for SQuAD 2.0")
    answerable_uses_start_logits: bool = hp(True, "the classifier uses the start-weighted representation")
    answerable_weight: float = hp(0.5, "weight of the answerability loss",
                                  valid=NON_NEGATIVE)
    joint_prediction: bool = hp(True, "end logits conditioned on the start (XLNet head)")
    beam_size: int = hp(20, "start candidates kept for joint prediction",
                        valid=AT_LEAST_ONE)
    qa_na_threshold: float = hp(-2.75, "no-answer threshold for SQuAD 2.0 test outputs")

    # TPU settings (official names)
    use_tpu: bool = hp(False, "official name: same as strategy tpu")
    num_tpu_cores: int = hp(1, "TPU cores",
                            valid=AT_LEAST_ONE)
    tpu_job_name: str | None = hp(None, "TPU worker job name")
    tpu_name: str | None = hp(None, "Cloud TPU to use")
    tpu_zone: str | None = hp(None, "GCE zone of the Cloud TPU")
    gcp_project: str | None = hp(None, "GCP project of the Cloud TPU")

    # locations (derived from data_dir and model_name unless given)
    raw_data_dir: str | None = hp(None, "task data dir pattern; default <data_dir>/finetuning_data/{task}")
    vocab_file: str | None = hp(None, "WordPiece vocab.txt or SentencePiece .model; default the vocab.txt/spm.model in init_checkpoint's directory (a release download's vocab.txt), else in <data_dir>/models/<model_name>, else <data_dir>/vocab.txt. A vocabulary other than the one beside init_checkpoint, or of another size than its embedding table, is refused")
    init_checkpoint: str | None = hp(None, "pre-trained weights (ours or official; a dir or a checkpoint prefix); default <data_dir>/models/<model_name>; \"\" for random init. Its bert_config.json, if any, sets the architecture")
    model_dir: str | None = hp(None, "default <data_dir>/models/<model_name>/finetuning_models/<tasks>_model")
    results_txt: str | None = hp(None, "default <data_dir>/models/<model_name>/results/<tasks>_results.txt; <model_dir>/results/<tasks>_results.txt when model_dir is set. Each trial's per-example dev outputs go beside it: <task>_dev_trial<k>_{predictions,conlleval}.txt (tagging), _predictions.jsonl (custom tasks), named after this file too when it is not <task>_results.txt")
    results_json: str | None = hp(None, "default <data_dir>/models/<model_name>/results/<tasks>_results.json; <model_dir>/results/<tasks>_results.json when model_dir is set")
    preprocessed_data_dir: str | None = hp(None, "featurized tfrecord cache dir; default <data_dir>/models/<model_name>/finetuning_tfrecords/<tasks>_tfrecords, under <model_dir> instead when model_dir is set")
    test_predictions_dir: str | None = hp(None, "where test-set predictions are written; default <data_dir>/models/<model_name>/test_predictions, <model_dir>/test_predictions when model_dir is set")
    qa_dir: str | None = hp(None, "where QA predictions, null odds and eval json are written; default <tasks>_qa beside results_txt's default")

    def _set_derived_defaults(self) -> None:
        if len(self.task_names) == 1:
            task = self.task_names[0]
            family = self.custom_task_family(task)
            if task in ("rte", "sts"):
                self.num_train_epochs = 10.0
            elif task in QA_TASKS or family == "qa":
                self.max_seq_length, self.num_train_epochs = 512, 2.0
            elif task == "chunk" or family == "tagging":
                self.max_seq_length = 256
        self._apply_defaults("model_size", SIZE_DEFAULTS)
        if self.debug:
            self.save_checkpoints_steps, self.use_tfrecords_if_existing = 1000000, False
            self.num_trials, self.iterations_per_loop, self.log_examples = 1, 1, True

    def _finalize(self) -> None:
        pretrained_dir = os.path.join(self.data_dir, "models", self.model_name)
        tasks = ",".join(self.task_names)
        # A str.format pattern: braces of the data dir itself are doubled to stay literal.
        literal = self.data_dir.replace("{", "{{").replace("}", "}}")
        self.raw_data_dir = self.raw_data_dir or os.path.join(literal, "finetuning_data", "{task}")
        if self.init_checkpoint is None and not self.debug:
            self.init_checkpoint = pretrained_dir
        self.vocab_file = pretrained_vocab.choose(
            self.vocab_file, self.init_checkpoint,
            [tokenization.find_vocab_file(d) for d in (pretrained_dir, self.data_dir)],
            missing=os.path.join(self.data_dir, "vocab.txt"))
        self.do_lower_case = pretrained_vocab.lower_case(self.do_lower_case, self.init_checkpoint)
        # An experiment with a model_dir of its own keeps its outputs under it: by the task
        # names alone, two such experiments would write the same files, the second replacing
        # the first. Without one, the official places.
        outputs = self.model_dir or pretrained_dir
        self.model_dir = self.model_dir or os.path.join(pretrained_dir, "finetuning_models",
                                                        tasks + "_model")
        results = os.path.join(outputs, "results")
        self.results_txt = self.results_txt or os.path.join(results, tasks + "_results.txt")
        self.results_json = self.results_json or os.path.join(results, tasks + "_results.json")
        self.qa_dir = self.qa_dir or os.path.join(results, tasks + "_qa")
        self.preprocessed_data_dir = self.preprocessed_data_dir or os.path.join(
            outputs, "finetuning_tfrecords", tasks + "_tfrecords")
        self.test_predictions_dir = self.test_predictions_dir or os.path.join(
            outputs, "test_predictions")
        if self.use_tpu:
            self.strategy = "tpu"
        if isinstance(self.custom_tasks, dict):  # else validate() names the problem
            # Spec files are read and data paths made absolute: the trial's settings then say
            # exactly which files it learned from.
            self.custom_tasks = {name: task_spec.resolve(name, spec)
                                 for name, spec in self.custom_tasks.items()}
        self.validate()

    def custom_task_family(self, name: str) -> str | None:
        """classification, regression, tagging or qa for a custom task; None otherwise."""
        if not isinstance(self.custom_tasks, dict) or name not in self.custom_tasks:
            return None
        spec = self.custom_tasks[name]
        if isinstance(spec, str):
            try:
                spec = task_spec.resolve(name, spec)
            except HParamError:
                return None  # validate() reports it
        return spec.get("type") if isinstance(spec, dict) else None

    def custom_task_specs(self) -> dict[str, task_spec.TaskSpec]:
        return task_spec.parse(self.custom_tasks)

    def eval_output_prefix(self, task_name: str, split: str, trial: int) -> str:
        """Where a trial's per-example eval outputs of one task go, next to the results files:
        <results dir>/<task>_<split>_trial<k>, the results file's name in front when it is not
        the task's own (a multi-task run, results_txt set per experiment), so runs sharing a
        results dir never replace each other's files."""
        directory, name = os.path.split(self.results_txt)
        stem = os.path.splitext(name)[0].removesuffix("_results")
        own = f"{task_name}_{split}_trial{trial}"
        return os.path.join(directory, own if stem == task_name else f"{stem}_{own}")

    def task_data_dir(self, task_name: str) -> str:
        try:
            return self.raw_data_dir.format(task=task_name)
        except (KeyError, IndexError, ValueError) as e:
            raise HParamError(
                f"hparam raw_data_dir {self.raw_data_dir!r} is not a pattern with {{task}} ({e!r}); "
                "double any other brace: {{ }}") from None

    def validate(self) -> None:
        self.check_values()  # types and ranges of each hparam (valid= of its field)
        checks = [
            (len(self.task_names) > 0, "task_names", "must name at least one task"),
        ]
        self._enforce(checks)
        self.custom_task_specs()  # each spec's keys and values
        modeling.check_max_seq_length(self.max_seq_length, self.bert_config())

    def pretrained_bert_config_file(self) -> str | None:
        """bert_config.json next to the initial checkpoint (our model dirs write one), if any."""
        if not self.init_checkpoint:
            return None
        path = os.path.join(pretrained_vocab.checkpoint_dir(self.init_checkpoint),
                            "bert_config.json")
        return path if fs.isfile(path) else None

    def bert_config(self) -> modeling.BertConfig:
        """The encoder's architecture: the pre-trained model's bert_config.json when it has one
        (so custom architectures need not be repeated), else the model size; then the overrides."""
        path = self.pretrained_bert_config_file()
        modeling.check_bert_values(self.model_hparam_overrides, "hparam 'model_hparam_overrides'")
        if path is None:
            return modeling.get_bert_config(self.model_size, self.vocab_size, self.embedding_size,
                                            self.model_hparam_overrides, self.debug)
        values = modeling.BertConfig.from_json_file(path).to_dict()
        values.update(self.model_hparam_overrides)
        return modeling.BertConfig.from_dict(values, where=f"{path} + model_hparam_overrides")


def hparams_reference() -> list[tuple[str, str, Any, str]]:
    return FinetuningConfig.describe()
