"""Pre-training hyperparameters. Names and defaults follow the official ELECTRA release.

`PretrainingConfig.from_hparams(model_name, data_dir, hparams)` resolves a run's settings:
defaults, then the user's hparams, then what they imply (model size per Table 6 of the paper,
debug mode, paths), then the user's hparams again so they always win.
"""
import dataclasses
import os
from typing import Any

from model import embedding_sharing, modeling, probing
from model import pretrained_vocab
from util import fs
from util.distribution import STRATEGIES
from util.hparams import (AT_LEAST_ONE, NON_NEGATIVE, POSITIVE, SEED, HParamError, HParams,
                          OneOf, Range, hp)

# Table 6 of the paper, for the keys the official config leaves to the user.
SIZE_DEFAULTS = {
    "small": dict(embedding_size=128, learning_rate=5e-4, train_batch_size=128,
                  num_train_steps=1000000, generator_hidden_size=0.25, mask_prob=0.15,
                  max_seq_length=128),
    "base": dict(embedding_size=768, learning_rate=2e-4, train_batch_size=256,
                 num_train_steps=766000, generator_hidden_size=1.0 / 3.0, mask_prob=0.15,
                 max_seq_length=512),
    "large": dict(embedding_size=1024, learning_rate=2e-4, train_batch_size=2048,
                  num_train_steps=400000, generator_hidden_size=0.25, mask_prob=0.25,
                  max_seq_length=512),
}


@dataclasses.dataclass
class PretrainingConfig(HParams):
    model_name: str = hp("", "name of the model; weights go to <data_dir>/models/<model_name>")
    data_dir: str = hp("", "directory holding pretrain_tfrecords/, vocab.txt and models/")
    debug: bool = hp(False, "tiny model, batch 8, 20 steps: a quick smoke run")
    do_train: bool = hp(True, "pre-train the model")
    do_eval: bool = hp(False, "evaluate generator and discriminator on held-out data")

    # loss functions
    electra_objective: bool = hp(True, "false trains a BERT-style masked LM instead")
    gen_weight: float = hp(1.0, "weight of the masked-LM (generator) loss",
                           valid=NON_NEGATIVE)
    disc_weight: float = hp(50.0, "weight of the replaced-token-detection loss (lambda)",
                            valid=NON_NEGATIVE)
    mask_prob: float = hp(0.15, "fraction of input tokens masked for the generator",
                          valid=Range(0, 1, lo_open=True, hi_open=True))

    # optimization
    learning_rate: float = hp(5e-4, "peak learning rate",
                              valid=POSITIVE)
    lr_decay_power: float = hp(1.0, "power of the polynomial decay to 0 (1 = linear)",
                               valid=NON_NEGATIVE)
    weight_decay_rate: float = hp(0.01, "decoupled weight decay (not on LayerNorm or biases)",
                                  valid=NON_NEGATIVE)
    num_warmup_steps: int = hp(10000, "linear warm-up steps",
                               valid=NON_NEGATIVE)
    adam_bias_correction: bool = hp(False, "true: Adam with bias correction; false reproduces the official update (none)")
    lr_decay_after_warmup: bool = hp(False, "true: decay starts after warm-up; false reproduces the official schedule (decay from step 0, warm-up multiplied on top)")
    clip_norm: float = hp(1.0, "global-norm gradient clipping",
                          valid=POSITIVE)
    clip_per_replica: bool = hp(False, "true: the official TPU rule (CrossShardOptimizer): each replica's loss over its own examples, its gradient clipped at clip_norm, the clipped gradients summed; false: the global batch's gradient clipped once, the same for any number of replicas (docs/FIDELITY.md)")
    gradient_accumulation_steps: int = hp(1, "micro-batches summed per optimizer step (train_batch_size is the effective batch)",
                                          valid=AT_LEAST_ONE)
    recompute_grad: bool = hp(False, "recompute each layer's activations in the backward pass to save memory")

    # training settings
    iterations_per_loop: int = hp(200, "steps run per host loop (one progress update)",
                                  valid=AT_LEAST_ONE)
    save_checkpoints_steps: int = hp(1000, "checkpoint every this many steps",
                                     valid=NON_NEGATIVE)
    save_checkpoints_secs: float = hp(0.0, "also checkpoint when this many seconds have passed since the last save, at the next step boundary (0: by steps only); bounds the work a crash loses in minutes (SIGTERM/SIGINT always save: exit status 75)",
                                      valid=NON_NEGATIVE)
    num_train_steps: int = hp(1000000, "total optimizer steps",
                              valid=AT_LEAST_ONE)
    num_eval_steps: int = hp(100, "batches evaluated by do_eval",
                             valid=AT_LEAST_ONE)
    eval_every_steps: int = hp(0, "evaluate on held-out data every this many steps during training (0: never)",
                               valid=NON_NEGATIVE)
    health_every_steps: int = hp(200, "check the run's health (pretrain/health.py: discriminator stalled or calling every token replaced, generator too strong or idle) from the training batches' own discriminator and masked-LM figures, pooled over this many steps from warm-up + 20 on (checked at the end of the block of steps that reaches it, and at the end of training); costs under 2% of training time; 0: only at evals",
                                 valid=NON_NEGATIVE)
    keep_checkpoint_max: int = hp(5, "checkpoints kept in the model dir (0: all, as tf.train.Saver)",
                                  valid=NON_NEGATIVE)
    probe_tasks: dict = hp({}, "frozen-feature probes run at every eval, task -> data: {\"pos\": CoNLL-2000 file, \"chunk\": CoNLL-2000 file, \"sst\": SST-2 dir}; accuracies reported as probe/<task>/<last|mean> (tools/probe.py)")
    probe_train_size: int = hp(2000, "probe_tasks: sentences (pos, chunk) or rows (sst) that train each probe; the last 1000 CoNLL sentences or the SST-2 dev file score it",
                               valid=AT_LEAST_ONE)
    seed: int = hp(0, "seed for initialisation, masking, sampling, dropout and data order",
                   valid=SEED)
    init_checkpoint: str | None = hp(None, "start from this checkpoint (ours or the official release's) with fresh optimizer state")
    init_checkpoint_keep_step: bool = hp(False, "with init_checkpoint: continue its global_step (and LR schedule) instead of starting from step 0")
    resume_on_changed_data: bool = hp(False, "resuming on training tfrecords other than the ones the model dir was trained on (files added, removed or rewritten): false refuses; true continues from the checkpoint on a new data order (the new files' stream from its start, seeded by seed and step)")
    shuffle_buffer_size: int = hp(100, "examples in the training shuffle buffer (official: 100)",
                                  valid=AT_LEAST_ONE)
    input_cycle_length: int = hp(4, "training shards read in parallel (interleaved) at a time (official: 4)",
                                 valid=AT_LEAST_ONE)

    # model settings
    model_size: str = hp("small", "one of small, base, large (Table 6 of the paper)",
                         valid=OneOf(tuple(SIZE_DEFAULTS)))
    model_hparam_overrides: dict = hp({}, "bert_config keys that override the model size's architecture")
    embedding_size: int | None = hp(None, "token embedding size (hidden size by default; 128 for small)",
                                    valid=AT_LEAST_ONE)
    vocab_size: int = hp(30522, "number of tokens in the vocabulary",
                         valid=AT_LEAST_ONE)
    do_lower_case: bool = hp(True, "lower-case the input text")
    compute_dtype: str = hp("float32", "float32, bfloat16 or float16 compute (weights stay float32)",
                            valid=OneOf(tuple(sorted(modeling.COMPUTE_DTYPES))))
    use_xla: bool | None = hp(None, "compile the train step with XLA; null: on for GPU/TPU, off on CPU where it is slower")

    # generator settings
    uniform_generator: bool = hp(False, "the generator samples uniformly at random")
    two_tower_generator: bool = hp(False, "Electric's two-tower cloze generator")
    untied_generator_embeddings: bool = hp(False, "generator gets its own token embeddings (the official spelling of embedding_sharing untied)")
    embedding_sharing: str | None = hp(None, "how the generator and the discriminator share token embeddings: shared (the paper's: one electra/embeddings module), untied (= untied_generator_embeddings true), gdes (DeBERTa-v3's gradient-disentangled sharing: the discriminator reads stop_gradient(E_G) + E_delta, E_delta = electra/embeddings/word_embeddings_delta, zero at the start, trained by its loss only; position and token-type tables and LayerNorm shared); null: shared, or untied with untied_generator_embeddings true",
                                       valid=OneOf(embedding_sharing.MODES))
    untied_generator: bool = hp(True, "false: generator and discriminator share all weights")
    generator_layers: float = hp(1.0, "fraction of discriminator layers in the generator",
                                 valid=Range(0, 1, lo_open=True))
    generator_hidden_size: float = hp(0.25, "fraction of discriminator width (hidden, FFN, heads) in the generator",
                                      valid=Range(0, 1, lo_open=True))
    disallow_correct: bool = hp(False, "generator may not sample the original token")
    temperature: float = hp(1.0, "temperature of the generator's sampling softmax",
                            valid=POSITIVE)

    # the paper's alternative objectives (Sections 3.2-3.5, Appendix F) and Electric
    electra_15: bool = hp(False, "ELECTRA 15% (Table 5): the discriminator loss only on the masked positions")
    replace_mlm: bool = hp(False, "Replace MLM (Table 5): with electra_objective false, masked positions get generator samples instead of [MASK]; masked-LM loss on them")
    all_tokens_mlm: bool = hp(False, "All-Tokens MLM (Table 5): as replace_mlm, but every token is predicted, through a copy mechanism (sigmoid copy probability D: p = D [x = input] + (1 - D) softmax)")
    unigram_generator: bool = hp(False, "the generator samples from unigram frequencies counted on the training tfrecords (Figure 3)")
    unigram_max_examples: int = hp(0, "unigram_generator: count frequencies on at most this many training examples (0: all)",
                                   valid=NON_NEGATIVE)
    adversarial_generator: bool = hp(False, "train the generator to maximise the discriminator loss with REINFORCE and a learned baseline (Appendix F) instead of maximum likelihood")
    freeze_generator: bool = hp(False, "two-stage training, stage 2: the generator's own weights get no updates (start from a tools/two_stage_init.py checkpoint)")
    electric_objective: bool = hp(False, "Electric (official release): noise-contrastive discriminator on the two_tower_generator's cloze probabilities")

    # batch sizes
    max_seq_length: int = hp(128, "tokens per example; must match the data",
                             valid=Range(3))
    train_batch_size: int = hp(128, "global batch size (split across replicas)",
                               valid=AT_LEAST_ONE)
    eval_batch_size: int = hp(128, "global eval batch size",
                              valid=AT_LEAST_ONE)
    max_predictions_per_seq: int | None = hp(None, "cap on masked positions; default int((mask_prob + 0.005) * max_seq_length)",
                                             valid=AT_LEAST_ONE)

    # distribution
    strategy: str = hp("default", "default (one device), mirrored (local GPUs), multi_worker (TF_CONFIG), tpu",
                       valid=OneOf(STRATEGIES))
    use_tpu: bool = hp(False, "official name: same as strategy tpu")
    num_tpu_cores: int = hp(1, "TPU cores (informational; TPUStrategy finds them)",
                            valid=AT_LEAST_ONE)
    tpu_job_name: str | None = hp(None, "TPU worker job name")
    tpu_name: str | None = hp(None, "Cloud TPU to use")
    tpu_zone: str | None = hp(None, "GCE zone of the Cloud TPU")
    gcp_project: str | None = hp(None, "GCP project of the Cloud TPU")

    # locations (derived from data_dir and model_name unless given)
    pretrain_tfrecords: str | None = hp(None, "glob of training tfrecords; default <data_dir>/pretrain_tfrecords/pretrain_data.tfrecord*")
    eval_tfrecords: str | None = hp(None, "glob of held-out tfrecords; default: the eval_files the data script listed in metadata.json")
    vocab_file: str | None = hp(None, "default the vocab.txt/spm.model in init_checkpoint's directory, else <data_dir>/vocab.txt; with init_checkpoint, a vocabulary other than the one beside it, or of another size than its embedding table, is refused")
    model_dir: str | None = hp(None, "default <data_dir>/models/<model_name>")
    results_txt: str | None = hp(None, "default <model_dir>/results/unsup_results.txt")
    results_json: str | None = hp(None, "default <model_dir>/results/unsup_results.json")

    def _set_derived_defaults(self) -> None:
        self._apply_defaults("model_size", SIZE_DEFAULTS)
        if self.debug:
            self.train_batch_size, self.num_train_steps = 8, 20
            self.eval_batch_size, self.iterations_per_loop, self.num_eval_steps = 4, 1, 2

    def _finalize(self) -> None:
        d = self.data_dir
        # A glob: the data dir's own [ ] * ? must match literally.
        self.pretrain_tfrecords = self.pretrain_tfrecords or os.path.join(
            fs.escape(d), "pretrain_tfrecords", "pretrain_data.tfrecord*")
        default_vocab = os.path.join(d, "vocab.txt")
        self.vocab_file = pretrained_vocab.choose(self.vocab_file or None, self.init_checkpoint,
                                                  [default_vocab], missing=default_vocab)
        self.model_dir = self.model_dir or os.path.join(d, "models", self.model_name)
        results_dir = os.path.join(self.model_dir, "results")
        self.results_txt = self.results_txt or os.path.join(results_dir, "unsup_results.txt")
        self.results_json = self.results_json or os.path.join(results_dir, "unsup_results.json")
        if self.max_predictions_per_seq is None:
            derived = int((self.mask_prob + 0.005) * self.max_seq_length)
            if derived < 1:  # name the keys the user set, not the derived one
                raise HParamError(
                    f"hparam 'mask_prob' {self.mask_prob} with max_seq_length "
                    f"{self.max_seq_length} masks no token: max_predictions_per_seq = "
                    f"int((mask_prob + 0.005) * max_seq_length) = {derived}. Raise mask_prob (or "
                    "max_seq_length), or set max_predictions_per_seq")
            self.max_predictions_per_seq = derived
        if self.use_tpu:
            self.strategy = "tpu"
        self._resolve_embedding_sharing()
        self.validate()

    def _resolve_embedding_sharing(self) -> None:
        """embedding_sharing and the official untied_generator_embeddings say the same thing
        after this; refuses them saying different things."""
        if self.embedding_sharing is None:
            self.embedding_sharing = "untied" if self.untied_generator_embeddings else "shared"
        elif self.untied_generator_embeddings and self.embedding_sharing != "untied":
            raise HParamError(
                f"hparam 'embedding_sharing' {self.embedding_sharing!r} contradicts hparam "
                "'untied_generator_embeddings' true (which means embedding_sharing 'untied'): "
                "set one of them")
        self.untied_generator_embeddings = self.embedding_sharing == "untied"

    def validate(self) -> None:
        self.check_values()  # types and ranges of each hparam (valid= of its field)
        checks = [
            (self.train_batch_size % self.gradient_accumulation_steps == 0,
             "gradient_accumulation_steps", f"must divide train_batch_size ({self.train_batch_size})"),
            (self.max_predictions_per_seq <= self.max_seq_length, "max_predictions_per_seq",
             f"must be <= max_seq_length ({self.max_seq_length})"),
        ]
        checks += self._probe_checks()
        checks += self._objective_checks()
        checks += self._sharing_checks()
        self._enforce(checks)
        modeling.check_max_seq_length(self.max_seq_length, self.bert_config())

    def _probe_checks(self) -> list:
        checks = []
        for task, path in self.probe_tasks.items():
            checks.append((task in probing.PROBE_TASKS, "probe_tasks",
                           f"entry {task!r} is not a probe (expected {list(probing.PROBE_TASKS)})"))
            expected = fs.isdir if task == "sst" else fs.isfile
            kind = "SST-2 directory" if task == "sst" else "CoNLL-2000 file"
            checks.append((isinstance(path, str) and expected(path), "probe_tasks",
                           f"entry {task!r} must name an existing {kind}, not {path!r}"))
        return checks

    def _objective_checks(self) -> list:
        """Combinations of the objective hparams that make sense (key named on failure)."""
        learned = not (self.uniform_generator or self.unigram_generator)
        return [
            (not (self.uniform_generator and self.unigram_generator), "unigram_generator",
             "cannot be combined with uniform_generator"),
            (not self.electra_15 or self.electra_objective, "electra_15",
             "needs electra_objective true"),
            (not (self.replace_mlm or self.all_tokens_mlm) or not self.electra_objective,
             "replace_mlm" if self.replace_mlm else "all_tokens_mlm",
             "is a masked-LM objective: set electra_objective false"),
            (not (self.replace_mlm and self.all_tokens_mlm), "all_tokens_mlm",
             "cannot be combined with replace_mlm (it includes it)"),
            (not (self.replace_mlm or self.all_tokens_mlm) or self.untied_generator,
             "untied_generator", "must be true for replace_mlm/all_tokens_mlm (a separate generator)"),
            (not self.adversarial_generator or (self.electra_objective and learned),
             "adversarial_generator", "needs electra_objective and a learned generator"),
            (not self.freeze_generator or (self.electra_objective and learned
                                           and self.untied_generator),
             "freeze_generator", "needs electra_objective and a separate learned generator"),
            (not self.freeze_generator or (self.generator_hidden_size == 1.0
                                           and self.generator_layers == 1.0),
             "freeze_generator", "(two-stage) needs generator_hidden_size and generator_layers 1"),
            (not self.electric_objective or (self.two_tower_generator and learned
                                             and self.untied_generator),
             "electric_objective", "needs two_tower_generator true (cloze probabilities)"),
            (not self.two_tower_generator or self.electric_objective or self.electra_objective,
             "two_tower_generator", "needs electric_objective or electra_objective"),
            (self.unigram_max_examples >= 0, "unigram_max_examples", "must be >= 0"),
        ]

    def _sharing_checks(self) -> list:
        """GDES needs a learned generator with a table of its own and a replaced-token
        discriminator that reads it (the key named on failure, the other key in the rule)."""
        if self.embedding_sharing != "gdes":
            return []
        discriminator = ((self.electra_objective or self.electric_objective)
                         and not (self.replace_mlm or self.all_tokens_mlm))
        key = "embedding_sharing"
        return [
            (discriminator, key, "gdes needs a replaced-token discriminator (electra_objective "
             "or electric_objective true, not replace_mlm or all_tokens_mlm): a masked-LM "
             "objective has no discriminator table"),
            (not self.uniform_generator, key, "gdes cannot be combined with uniform_generator "
             "true: a uniform generator has no token table to share"),
            (not self.unigram_generator, key, "gdes cannot be combined with unigram_generator "
             "true: a unigram generator has no token table to share"),
            (not self.freeze_generator, key, "gdes cannot be combined with freeze_generator true: "
             "the two-stage generator keeps its own frozen copy of the embeddings, nothing is "
             "shared"),
            (self.untied_generator, key, "gdes needs untied_generator true: with untied_generator "
             "false the discriminator is its own generator (one network, one table)"),
        ]

    def bert_config(self) -> modeling.BertConfig:
        """The discriminator's architecture."""
        return modeling.get_bert_config(self.model_size, self.vocab_size, self.embedding_size,
                                        self.model_hparam_overrides, self.debug)

    def generator_config(self) -> modeling.BertConfig:
        return modeling.get_generator_config(self.bert_config(), self.generator_hidden_size,
                                             self.generator_layers)


def hparams_reference() -> list[tuple[str, str, Any, str]]:
    return PretrainingConfig.describe()
