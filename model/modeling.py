"""The BERT-style Transformer encoder ELECTRA uses for both generator and discriminator.

Built from tf.Module (no Keras). Every variable carries the official checkpoint name, e.g.
`electra/embeddings/word_embeddings`, `electra/embeddings_project/kernel`,
`electra/encoder/layer_0/attention/self/query/kernel`, with kernels oriented [in, out], so a
checkpoint of the official release loads by name and ours reads in tools that read those.
"""
import contextlib
import copy
import dataclasses
import json
import math
from typing import NamedTuple

import tensorflow as tf
# Not in TensorFlow's public API: whether a graph is being traced for XLA.
from tensorflow.python.ops import control_flow_util

from model import layers
from model import token_packing
from util import io_utils
from util.hparams import HParamError

COMPUTE_DTYPES = {"float32": tf.float32, "bfloat16": tf.bfloat16, "float16": tf.float16}


@dataclasses.dataclass
class BertConfig:
    """Architecture hyperparameters; keys as in the official `bert_config.json`.

    `embedding_size` (ELECTRA's factorised embeddings) defaults to `hidden_size`.
    """
    vocab_size: int
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    initializer_range: float = 0.02
    embedding_size: int | None = None

    def __post_init__(self):
        check_bert_values(dataclasses.asdict(self), "bert config")
        if self.embedding_size is None:
            self.embedding_size = self.hidden_size
        layers.get_activation(self.hidden_act)  # fails early on an unknown activation

    @classmethod
    def from_dict(cls, values: dict, where: str = "bert config") -> "BertConfig":
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"{where}: unknown keys {unknown}; expected some of {sorted(known)}")
        if "vocab_size" not in values:
            raise ValueError(f"{where}: missing required key 'vocab_size'")
        check_bert_values(values, where)
        return cls(**values)

    @classmethod
    def from_json_file(cls, path: str) -> "BertConfig":
        return cls.from_dict(io_utils.read_json(path), where=path)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def to_json_string(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)


_SIZE_KEYS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
              "intermediate_size", "max_position_embeddings", "type_vocab_size", "embedding_size")
_DROPOUT_KEYS = ("hidden_dropout_prob", "attention_probs_dropout_prob")


def check_bert_values(values: dict, where: str) -> None:
    """HParamError naming `where` and the key for an architecture value of the wrong type or out
    of range (a string, float, bool or 0 where a size belongs would crash later, or silently
    build another model: true is an int in Python)."""
    def fail(key, rule):
        raise HParamError(f"{where}: {key} must be {rule}, got {values[key]!r}")

    def is_number(v):
        return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)

    for key in _SIZE_KEYS:
        v = values.get(key)
        if key in values and not (v is None and key == "embedding_size") and not (
                isinstance(v, int) and not isinstance(v, bool) and v >= 1):
            fail(key, "an integer >= 1")
    for key in _DROPOUT_KEYS:
        if key in values and not (is_number(values[key]) and 0 <= values[key] < 1):
            fail(key, "a number in [0, 1)")
    if "initializer_range" in values and not (is_number(values["initializer_range"])
                                              and values["initializer_range"] > 0):
        fail("initializer_range", "a number > 0")
    if "hidden_act" in values and not (isinstance(values["hidden_act"], str)
                                       and values["hidden_act"].lower() in layers.ACTIVATIONS):
        fail("hidden_act", f"one of {sorted(layers.ACTIVATIONS)}")
    hidden, heads = values.get("hidden_size"), values.get("num_attention_heads")
    if hidden is not None and heads is not None and hidden % heads:
        raise HParamError(f"{where}: hidden_size ({hidden}) must be a multiple of "
                          f"num_attention_heads ({heads})")


# Table 6 of the paper: (layers, hidden, embedding size). Heads = hidden / 64, FFN = 4 x hidden.
MODEL_SIZES = {
    "small": dict(num_hidden_layers=12, hidden_size=256, embedding_size=128),
    "base": dict(num_hidden_layers=12, hidden_size=768, embedding_size=768),
    "large": dict(num_hidden_layers=24, hidden_size=1024, embedding_size=1024),
}
# The official debug model: a few steps on any machine.
DEBUG_SIZE = dict(num_hidden_layers=3, hidden_size=144, intermediate_size=576,
                  num_attention_heads=4)


def get_bert_config(model_size: str, vocab_size: int, embedding_size: int | None = None,
                    overrides: dict | None = None, debug: bool = False) -> BertConfig:
    """The discriminator architecture for a model size, then the user's overrides on top."""
    if model_size not in MODEL_SIZES:
        raise ValueError(f"unknown model_size {model_size!r}; expected one of {sorted(MODEL_SIZES)}")
    size = dict(MODEL_SIZES[model_size])
    values = dict(vocab_size=vocab_size,
                  num_hidden_layers=size["num_hidden_layers"],
                  hidden_size=size["hidden_size"],
                  num_attention_heads=max(1, size["hidden_size"] // 64),
                  intermediate_size=4 * size["hidden_size"],
                  embedding_size=embedding_size or size["embedding_size"])
    if debug:
        values.update(DEBUG_SIZE)
        values["embedding_size"] = embedding_size or DEBUG_SIZE["hidden_size"]
    overrides = dict(overrides or {})
    values.update(overrides)
    return BertConfig.from_dict(values, where="hparam 'model_hparam_overrides'")


def get_generator_config(disc_config: BertConfig, generator_hidden_size: float,
                         generator_layers: float) -> BertConfig:
    """The generator: a fraction of the discriminator's width and depth."""
    config = copy.deepcopy(disc_config)
    # As the official release: FFN 4x hidden and one head per 64 hidden units (at least one).
    config.hidden_size = max(1, int(round(disc_config.hidden_size * generator_hidden_size)))
    config.num_hidden_layers = max(1, int(round(disc_config.num_hidden_layers * generator_layers)))
    config.intermediate_size = 4 * config.hidden_size
    config.num_attention_heads = max(1, config.hidden_size // 64)
    if config.hidden_size % config.num_attention_heads:
        raise ValueError(
            f"generator hidden size {config.hidden_size} is not a multiple of its "
            f"{config.num_attention_heads} heads; adjust generator_hidden_size")
    return config


def check_max_seq_length(max_seq_length: int, config: BertConfig) -> None:
    """Raises HParamError when examples are longer than the model's position embeddings."""
    if max_seq_length > config.max_position_embeddings:
        raise HParamError(
            f"max_seq_length ({max_seq_length}) exceeds max_position_embeddings "
            f"({config.max_position_embeddings}) of the model")


class Embeddings(tf.Module):
    """Token + position + token-type embeddings, LayerNorm and dropout, under `<scope>/embeddings`."""

    def __init__(self, config: BertConfig, scope: str = "electra", seed: int = 0):
        super().__init__(name=f"{scope}_embeddings")
        e, prefix = config.embedding_size, f"{scope}/embeddings"
        std = config.initializer_range
        self.config = config
        self.word_embeddings = layers.create_variable(
            f"{prefix}/word_embeddings", [config.vocab_size, e], "normal", std, seed)
        self.token_type_embeddings = layers.create_variable(
            f"{prefix}/token_type_embeddings", [config.type_vocab_size, e], "normal", std, seed)
        self.position_embeddings = layers.create_variable(
            f"{prefix}/position_embeddings", [config.max_position_embeddings, e], "normal", std,
            seed)
        self.layer_norm = layers.LayerNorm(e, f"{prefix}/LayerNorm")

    def __call__(self, input_ids, token_type_ids, *, training: bool, seeds, dtype=tf.float32,
                 inputs_embeds=None, packing: token_packing.Packing | None = None):
        """input_ids, token_type_ids: int32 [B, L] -> [B, L, E] in `dtype`, or with `packing`
        [T, E], the real tokens only.

        `inputs_embeds` ([B, L, E]) replaces the word-embedding lookup when given.
        """
        seq_len = tf.shape(input_ids)[1]
        words = tf.gather(self.word_embeddings, input_ids) if inputs_embeds is None else inputs_embeds
        x = (tf.cast(words, tf.float32)
             + tf.gather(self.token_type_embeddings, token_type_ids)
             + self.position_embeddings[tf.newaxis, :seq_len])
        if packing is not None:
            x = token_packing.pack(tf.reshape(x, [-1, x.shape[-1]]), packing)
        x = tf.cast(self.layer_norm(x), dtype)
        return layers.dropout(x, self.config.hidden_dropout_prob, seeds, training)


class TransformerLayer(tf.Module):
    """Self-attention + residual + LayerNorm, then GELU FFN + residual + LayerNorm (post-LN)."""

    NUM_DROPOUTS = 3  # dropout seeds one call draws: attention probs, attention out, FFN out

    def __init__(self, config: BertConfig, scope: str, seed: int = 0):
        super().__init__(name=scope.replace("/", "_"))
        h, f, std = config.hidden_size, config.intermediate_size, config.initializer_range
        self.config = config
        self.num_heads = config.num_attention_heads
        self.head_size = h // config.num_attention_heads
        self.query = layers.Dense(h, h, f"{scope}/attention/self/query", stddev=std, seed=seed)
        self.key = layers.Dense(h, h, f"{scope}/attention/self/key", stddev=std, seed=seed)
        self.value = layers.Dense(h, h, f"{scope}/attention/self/value", stddev=std, seed=seed)
        self.attention_output = layers.Dense(h, h, f"{scope}/attention/output/dense", stddev=std,
                                             seed=seed)
        self.attention_norm = layers.LayerNorm(h, f"{scope}/attention/output/LayerNorm")
        self.intermediate = layers.Dense(h, f, f"{scope}/intermediate/dense", config.hidden_act,
                                         stddev=std, seed=seed)
        self.output_dense = layers.Dense(f, h, f"{scope}/output/dense", stddev=std, seed=seed)
        self.output_norm = layers.LayerNorm(h, f"{scope}/output/LayerNorm")

    _WEIGHTS = [(part, name) for part in ("query", "key", "value", "attention_output")
                for name in ("kernel", "bias")] + [
        ("attention_norm", "gamma"), ("attention_norm", "beta"), ("intermediate", "kernel"),
        ("intermediate", "bias"), ("output_dense", "kernel"), ("output_dense", "bias"),
        ("output_norm", "gamma"), ("output_norm", "beta")]

    def weights(self) -> list:
        """The layer's variables, in one fixed order (`with_weights` takes the same order)."""
        return [getattr(getattr(self, part), name) for part, name in self._WEIGHTS]

    @contextlib.contextmanager
    def with_weights(self, weights: list):
        """Within: the layer computes with `weights` (tensors) in place of its own variables.
        Plain attribute writes, so that tf.Module does not track the tensors; restored after."""
        own = self.weights()
        try:
            for (part, name), w in zip(self._WEIGHTS, weights):
                object.__setattr__(getattr(self, part), name, w)
            yield self
        finally:
            for (part, name), w in zip(self._WEIGHTS, own):
                object.__setattr__(getattr(self, part), name, w)

    def __call__(self, x, attention_bias, *, batch_size, seq_len, training: bool, seeds,
                 packing: token_packing.Packing | None = None):
        """x: [B*L, H] (kept 2-D so every matmul is one large GEMM), or with `packing` [T, H],
        the real tokens only; attention_bias: [B, 1, 1, L]."""
        n, d = self.num_heads, self.head_size

        def split_heads(t):  # [B*L or T, H] -> [B, N, L, d]
            if packing is not None:
                return token_packing.to_heads(t, packing)
            return tf.transpose(tf.reshape(t, [batch_size, seq_len, n, d]), [0, 2, 1, 3])

        q = split_heads(self.query(x))
        k = split_heads(self.key(x))
        v = split_heads(self.value(x))
        probs = layers.attention_probs(tf.matmul(q, k, transpose_b=True), attention_bias,
                                       1.0 / d ** 0.5, self.config.attention_probs_dropout_prob,
                                       seeds, training)
        if packing is not None:
            context = token_packing.from_heads(tf.matmul(probs, v), packing)
        else:
            context = tf.reshape(tf.transpose(tf.matmul(probs, v), [0, 2, 1, 3]),
                                 [batch_size * seq_len, n * d])
        rate = self.config.hidden_dropout_prob
        x = layers.dropout_add_norm(self.attention_output(context), x, self.attention_norm, rate,
                                    seeds, training)
        ffn = self.output_dense(self.intermediate(x))
        return layers.dropout_add_norm(ffn, x, self.output_norm, rate, seeds, training)


# True: the encoder's layers run through one traced function per model, called with each
# layer's weights, so a 12-layer model traces one layer (and its gradient) instead of twelve:
# ELECTRA-Small's first fine-tuning step took 9.8 s instead of 14.1 s (BENCHMARKS.md,
# "Tracing, graph building and input pipelines"). TensorFlow inlines function calls when it instantiates a step: the
# numbers and the step time measured the same. Not inside an XLA compile: XLA took twice as long to
# compile a step whose layers were calls (27 s against 15 s for a tiny pre-training step).
# False: each layer's ops are traced in place. Read when a step is traced.
SHARE_LAYER_TRACE = True


def _compiled_by_xla() -> bool:
    """Whether the graph being traced is part of an XLA compile (jit_compile), however nested."""
    return control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph())


class _FixedSeeds:
    """Seeds drawn ahead of time, handed out in order (the SeedStream interface)."""

    def __init__(self, seeds: list):
        self._seeds = list(seeds)

    def next(self):
        return self._seeds.pop(0)


class EncoderOutput(NamedTuple):
    sequence_output: tf.Tensor  # [B, L, H] in the compute dtype
    pooled_output: tf.Tensor  # [B, H]: the [CLS] vector; ELECTRA has no tanh pooler
    all_layer_outputs: list  # per layer [B, L, H]
    embedding_output: tf.Tensor  # [B, L, H] after embeddings (and projection)


class BertModel(tf.Module):
    """The encoder. `scope` is "electra" for the discriminator and "generator" for the generator.

    Pass `embeddings` to share an existing Embeddings module (ELECTRA's tied generator embeddings):
    the variables are then the same objects and are saved once, under their owner's scope.
    `remove_padding`: the per-token work runs on the real tokens only (model/token_packing.py;
    shapes then depend on the data, so not under XLA).
    """

    def __init__(self, config: BertConfig, scope: str = "electra",
                 embeddings: Embeddings | None = None, compute_dtype: str = "float32",
                 seed: int = 0, recompute_grad: bool = False, remove_padding: bool = False):
        super().__init__(name=scope)
        if compute_dtype not in COMPUTE_DTYPES:
            raise ValueError(f"unknown compute dtype {compute_dtype!r}; expected one of "
                             f"{sorted(COMPUTE_DTYPES)}")
        self.config = config
        self.scope = scope
        self.dtype = COMPUTE_DTYPES[compute_dtype]
        # Training keeps only each layer's input; the backward pass recomputes the rest.
        self.recompute_grad = recompute_grad
        self.remove_padding = remove_padding
        self.embeddings = embeddings if embeddings is not None else Embeddings(config, scope, seed)
        embedding_size = self.embeddings.config.embedding_size
        self.embeddings_project = None
        if embedding_size != config.hidden_size:
            # Official: tf.layers.dense without an initializer, i.e. Glorot-uniform.
            self.embeddings_project = layers.Dense(
                embedding_size, config.hidden_size, f"{scope}/embeddings_project", seed=seed,
                init="glorot_uniform")
        self.layers = [TransformerLayer(config, f"{scope}/encoder/layer_{i}", seed)
                       for i in range(config.num_hidden_layers)]
        # One traced function for all the layers (SHARE_LAYER_TRACE), traced per mode and input
        # signature. Not tracked by tf.Module (no part of checkpoints or exported models).
        object.__setattr__(self, "_layer_function",
                           tf.function(self._layer_with_weights, autograph=False))

    # Plain Python under any tf.function (no tensor-dependent control flow): autograph's source
    # conversion of every layer only slows tracing (probes, exports, callers' own tf.functions).
    @tf.autograph.experimental.do_not_convert
    def __call__(self, input_ids, input_mask, token_type_ids, *, training: bool, seed=None,
                 inputs_embeds=None) -> EncoderOutput:
        """input_ids, input_mask, token_type_ids: int32 [B, L]; seed: int [2] (needed if training)."""
        with layers.elementwise_fusion(self._fuses(training)):
            return self._encode(input_ids, input_mask, token_type_ids, training, seed,
                                inputs_embeds)

    def _fuses(self, training: bool) -> bool:
        """Whether this pass compiles the elementwise blocks with XLA.

        Packed, the per-token shapes change with every batch's number of real tokens, and XLA
        compiles the blocks for each. In float32 the blocks as graph ops take a step as long, so
        they run that way; in 16-bit the compiled blocks make a training step faster (they
        compute in float32 and round once) and repay their compiles over a run (BENCHMARKS.md,
        "The packed encoder's elementwise blocks"). A forward pass alone (evaluation, prediction) gains too little
        from them to repay a compile per shape: graph ops. With padding the shapes are few."""
        if not self.remove_padding:
            return True
        return training and self.dtype != tf.float32

    def _encode(self, input_ids, input_mask, token_type_ids, training, seed, inputs_embeds):
        seeds = layers.SeedStream(seed) if training else None
        batch_size, seq_len = tf.shape(input_ids)[0], tf.shape(input_ids)[1]
        packing = (token_packing.plan(input_mask, self.config.num_attention_heads)
                   if self.remove_padding else None)
        x = self.embeddings(input_ids, token_type_ids, training=training, seeds=seeds,
                            dtype=self.dtype, inputs_embeds=inputs_embeds, packing=packing)
        hidden = self.config.hidden_size

        def padded(t):  # a layer's output, [B*L or T, H] -> [B, L, H]
            if packing is not None:
                t = token_packing.unpack(t, packing)
            return tf.reshape(t, [batch_size, seq_len, hidden])

        if self.embeddings_project is not None:
            x = self.embeddings_project(x)  # [B, L, H] or packed [T, H]
        embedding_output = padded(x)
        if packing is None:
            x = tf.reshape(x, [batch_size * seq_len, hidden])
        attention_bias = self.attention_bias(input_mask, seq_len)
        # Known sizes enter the shared layer function as numbers: as tensors its shapes
        # would be unknown inside, and a block of unknown size is compiled by XLA.
        shape = tf.TensorShape(input_ids.shape)  # numpy arrays too
        known = shape if shape.rank == 2 else [None, None]
        static_dims = [tensor if size is None else size
                       for size, tensor in zip(known, (batch_size, seq_len))]
        outputs = []
        for layer in self.layers:
            # The layer's dropout seeds are drawn here, outside the layer: a recomputation in the
            # backward pass must redraw exactly the forward pass's masks.
            layer_seeds = ([seeds.next() for _ in range(layer.NUM_DROPOUTS)] if training
                           else None)

            def run(h, bias, layer=layer, layer_seeds=layer_seeds):
                # Also when a recomputation in the backward pass calls it, outside __call__.
                return self._run_layer(layer, h, bias, batch_size, seq_len, layer_seeds, packing,
                                       training)

            if training and self.recompute_grad:
                x = tf.recompute_grad(run)(x, attention_bias)
            elif SHARE_LAYER_TRACE and not _compiled_by_xla():
                # Values, not variables, enter the function (model/layers.py elementwise_block
                # says why); the gradients reach the variables through these reads.
                x = self._layer_function([tf.convert_to_tensor(w) for w in layer.weights()], x,
                                         attention_bias, *static_dims, layer_seeds or [],
                                         packing, training)
            else:
                x = run(x, attention_bias)
            outputs.append(padded(x))
        sequence_output = outputs[-1]
        return EncoderOutput(sequence_output, sequence_output[:, 0], outputs, embedding_output)

    def _run_layer(self, layer, x, bias, batch_size, seq_len, layer_seeds, packing, training):
        """One layer's forward pass, its dropout masks from `layer_seeds` (drawn by _encode)."""
        with layers.elementwise_fusion(self._fuses(training)):
            return layer(x, bias, batch_size=batch_size, seq_len=seq_len, training=training,
                         seeds=_FixedSeeds(layer_seeds) if training else None, packing=packing)

    def _layer_with_weights(self, weights, x, bias, batch_size, seq_len, layer_seeds, packing,
                            training):
        """The body of the shared layer function: the first layer, computing with `weights`."""
        with self.layers[0].with_weights(weights) as layer:
            return self._run_layer(layer, x, bias, batch_size, seq_len, layer_seeds, packing,
                                   training)

    def attention_bias(self, input_mask, seq_len) -> tf.Tensor:
        """Additive mask, float32 [B, 1, 1 or L, L]: 0 where attention is allowed, -10000 at
        padding (as BERT). Subclasses restrict it further (e.g. to one direction)."""
        del seq_len  # every position may attend to every real token
        return (1.0 - tf.cast(input_mask, tf.float32))[:, tf.newaxis, tf.newaxis, :] * -10000.0
