"""Name, orientation and config mapping between our checkpoints and Hugging Face ELECTRA files.

Pure numpy: tensors in, tensors out; nothing here builds a model or touches the disk.

Parameter names follow `transformers/models/electra/modeling_electra.py`:

  ours (TF1 names, kernels [in, out])     Hugging Face (torch names, weights [out, in])
  <scope>/embeddings/word_embeddings      electra.embeddings.word_embeddings.weight
  <scope>/embeddings/LayerNorm/gamma      electra.embeddings.LayerNorm.weight (beta: .bias)
  <scope>/embeddings_project/kernel       electra.embeddings_project.weight ([E, H] -> [H, E])
  <scope>/encoder/layer_3/attention/self/query/kernel
                                          electra.encoder.layer.3.attention.self.query.weight
  discriminator_predictions/dense         discriminator_predictions.dense
  discriminator_predictions/dense_1       discriminator_predictions.dense_prediction
  generator_predictions/dense, LayerNorm  generator_predictions.dense, .LayerNorm
  generator_predictions/output_bias       generator_lm_head.bias (its weight: the tied table)
  task_specific/<task>/dense [H, C]       classifier.out_proj (sequence classification, below)
                                          classifier (token classification: the same single
                                          dense layer on every token, an exact match)

`<scope>` is `electra` for the discriminator and `generator` for the generator; the HF model
always calls its encoder `electra`. A generator that shares the discriminator's embeddings takes
them from `electra/embeddings/*`. Under GDES (model/embedding_sharing.py) that is the generator's
table E_G; the discriminator exports one table, E_G + E_delta.

Sequence classification. The official head is dropout + ONE dense layer on the [CLS] vector. The
Hugging Face head (ElectraClassificationHead) is dense(H, H) + exact GELU + out_proj(H, C), and
its GELU is hard-coded, whatever `hidden_act` says. We map the official head exactly:
  classifier.dense    = identity weight, bias `shift` (per unit, large enough that every input
                        lands where GELU(z) == z in float32: GELU(z) = z * Phi(z) and Phi(z)
                        rounds to 1 for z > ~5.5),
  classifier.out_proj = our kernel (transposed), bias = ours - kernel^T shift,
so out_proj(gelu(dense(x))) = W^T (x + shift) + b - W^T shift = W^T x + b. The bound comes from
the [CLS] vector being a LayerNorm output: |x_i - beta_i| <= |gamma_i| * sqrt(H - 1). The
exported config sets `classifier_dropout` 0, since dropout between the two layers would drop the
shift. Rounding `x + shift` and `b - W^T shift` to float32 costs ~1e-5 in the logits (measured:
tools/check_hf_equivalence.py); our exact bias travels in the safetensors metadata, so
ours -> HF -> ours is bit-identical. An HF-trained head
(a real dense layer) has no official equivalent: import keeps its encoder and reports the head.

Activations. Our "gelu" is the exact (erf) GELU of the official ELECTRA code, which is also what
HF calls "gelu" (and hard-codes in its generator head), so names map one to one; HF's tanh form
"gelu_new" (alias "gelu_pytorch_tanh") runs here as "gelu_new".
"""
import json
import math
import re
from typing import NamedTuple

import numpy as np

from model import embedding_sharing, modeling

HF_PREFIX = "electra"
# Our BertConfig.hidden_act -> HF ElectraConfig.hidden_act (ACT2FN names).
ACT_TO_HF = {"gelu": "gelu", "gelu_new": "gelu_new", "relu": "relu", "tanh": "tanh",
             "linear": "linear"}
# HF -> ours.
ACT_FROM_HF = {"gelu": "gelu", "gelu_new": "gelu_new", "gelu_pytorch_tanh": "gelu_new",
               "relu": "relu", "tanh": "tanh", "linear": "linear"}
ARCHITECTURES = {"discriminator": "ElectraForPreTraining", "generator": "ElectraForMaskedLM",
                 "classifier": "ElectraForSequenceClassification",
                 "tagger": "ElectraForTokenClassification"}
KIND_OF_ARCHITECTURE = {v: k for k, v in ARCHITECTURES.items()}
HEAD_METADATA_KEY = "electra_official_head"
# Margin above the LayerNorm bound for the identity-GELU trick: erf(8 / sqrt 2) == 1.0 in float32.
GELU_LINEAR_MARGIN = 8.0


class ConversionError(ValueError):
    """Tensors or a config that do not describe the expected ELECTRA model."""


class Pair(NamedTuple):
    ours: str
    hf: str
    transpose: bool  # our [in, out] kernel <-> HF [out, in] weight


# -- names ---------------------------------------------------------------------------------------


def _dense(ours: str, hf: str) -> list[Pair]:
    return [Pair(f"{ours}/kernel", f"{hf}.weight", True), Pair(f"{ours}/bias", f"{hf}.bias", False)]


def _layer_norm(ours: str, hf: str) -> list[Pair]:
    return [Pair(f"{ours}/gamma", f"{hf}.weight", False), Pair(f"{ours}/beta", f"{hf}.bias", False)]


def embedding_pairs(emb_scope: str) -> list[Pair]:
    """The embedding tables and their LayerNorm, ours under `<emb_scope>/embeddings/`."""
    ours, hf = f"{emb_scope}/embeddings", f"{HF_PREFIX}.embeddings"
    pairs = [Pair(f"{ours}/{t}", f"{hf}.{t}.weight", False)
             for t in ("word_embeddings", "position_embeddings", "token_type_embeddings")]
    return pairs + _layer_norm(f"{ours}/LayerNorm", f"{hf}.LayerNorm")


def encoder_pairs(config: modeling.BertConfig, scope: str,
                  emb_scope: str | None = None) -> list[Pair]:
    """Every variable of a BertModel with `config` under `scope` (embeddings under `emb_scope`)."""
    pairs = embedding_pairs(emb_scope or scope)
    if config.embedding_size != config.hidden_size:
        pairs += _dense(f"{scope}/embeddings_project", f"{HF_PREFIX}.embeddings_project")
    for i in range(config.num_hidden_layers):
        ours, hf = f"{scope}/encoder/layer_{i}", f"{HF_PREFIX}.encoder.layer.{i}"
        for part in ("query", "key", "value"):
            pairs += _dense(f"{ours}/attention/self/{part}", f"{hf}.attention.self.{part}")
        pairs += _dense(f"{ours}/attention/output/dense", f"{hf}.attention.output.dense")
        pairs += _layer_norm(f"{ours}/attention/output/LayerNorm",
                             f"{hf}.attention.output.LayerNorm")
        pairs += _dense(f"{ours}/intermediate/dense", f"{hf}.intermediate.dense")
        pairs += _dense(f"{ours}/output/dense", f"{hf}.output.dense")
        pairs += _layer_norm(f"{ours}/output/LayerNorm", f"{hf}.output.LayerNorm")
    return pairs


def discriminator_head_pairs() -> list[Pair]:
    return (_dense("discriminator_predictions/dense", "discriminator_predictions.dense")
            + _dense("discriminator_predictions/dense_1",
                     "discriminator_predictions.dense_prediction"))


def generator_head_pairs() -> list[Pair]:
    """The masked-LM head; `generator_lm_head.weight` (the tied table) is handled separately."""
    return (_dense("generator_predictions/dense", "generator_predictions.dense")
            + _layer_norm("generator_predictions/LayerNorm", "generator_predictions.LayerNorm")
            + [Pair("generator_predictions/output_bias", "generator_lm_head.bias", False)])


def _convert(tensors: dict[str, np.ndarray], pairs: list[Pair],
             where: str) -> dict[str, np.ndarray]:
    missing = [p.ours for p in pairs if p.ours not in tensors]
    if missing:
        shown = ", ".join(missing[:8]) + (" ..." if len(missing) > 8 else "")
        raise ConversionError(f"{where}: {len(missing)} variables missing: {shown}")
    out = {}
    for p in pairs:
        value = np.asarray(tensors[p.ours])
        out[p.hf] = np.ascontiguousarray(value.T if p.transpose else value)
    return out


def _convert_back(tensors: dict[str, np.ndarray], pairs: list[Pair],
                  where: str) -> dict[str, np.ndarray]:
    missing = [p.hf for p in pairs if p.hf not in tensors]
    if missing:
        shown = ", ".join(missing[:8]) + (" ..." if len(missing) > 8 else "")
        raise ConversionError(f"{where}: {len(missing)} parameters missing: {shown}")
    out = {}
    for p in pairs:
        value = np.asarray(tensors[p.hf])
        out[p.ours] = np.ascontiguousarray(value.T if p.transpose else value)
    return out


# -- configs -------------------------------------------------------------------------------------


def hf_config(config: modeling.BertConfig, kind: str, pad_token_id: int = 0,
              labels: list[str] | None = None, task_name: str | None = None) -> dict:
    """config.json for `kind` ("discriminator", "generator" or "classifier")."""
    if kind not in ARCHITECTURES:
        raise ConversionError(f"unknown model kind {kind!r}; expected one of "
                              f"{sorted(ARCHITECTURES)}")
    if config.hidden_act not in ACT_TO_HF:
        raise ConversionError(f"hidden_act {config.hidden_act!r} has no Hugging Face equivalent")
    values = {
        "architectures": [ARCHITECTURES[kind]],
        "model_type": "electra",
        "vocab_size": config.vocab_size,
        "embedding_size": config.embedding_size,
        "hidden_size": config.hidden_size,
        "num_hidden_layers": config.num_hidden_layers,
        "num_attention_heads": config.num_attention_heads,
        "intermediate_size": config.intermediate_size,
        "hidden_act": ACT_TO_HF[config.hidden_act],
        "hidden_dropout_prob": config.hidden_dropout_prob,
        "attention_probs_dropout_prob": config.attention_probs_dropout_prob,
        "max_position_embeddings": config.max_position_embeddings,
        "type_vocab_size": config.type_vocab_size,
        "initializer_range": config.initializer_range,
        "layer_norm_eps": 1e-12,
        "pad_token_id": pad_token_id,
        "position_embedding_type": "absolute",
        "summary_type": "first",
        "summary_use_proj": True,
        "summary_activation": "gelu",
        "summary_last_dropout": 0.1,
        "classifier_dropout": None,
        "use_cache": True,
        "torch_dtype": "float32",
    }
    if kind in ("classifier", "tagger"):
        if not labels:
            raise ConversionError(f"a {kind} export needs its label names")
        values["id2label"] = {str(i): str(label) for i, label in enumerate(labels)}
        values["label2id"] = {str(label): i for i, label in enumerate(labels)}
        values["finetuning_task"] = task_name
    if kind == "classifier":
        values["problem_type"] = ("regression" if len(labels) == 1
                                  else "single_label_classification")
        values["classifier_dropout"] = 0.0  # see the module docstring: dropout would drop the shift
    if kind == "tagger":
        values["classifier_dropout"] = 0.1  # the official heads' dropout
    return values


HF_DEFAULT_EMBEDDING_SIZE = 128  # transformers' ElectraConfig default


def bert_config_from_hf(values: dict, where: str = "config.json"
                        ) -> tuple[modeling.BertConfig, list[str]]:
    """(our BertConfig, notes) from an HF ElectraConfig dict; notes say what is approximated."""
    if values.get("model_type") != "electra":
        raise ConversionError(f"{where}: model_type is {values.get('model_type')!r}, not 'electra'")
    notes = []
    act = values.get("hidden_act", "gelu")
    if act not in ACT_FROM_HF:
        raise ConversionError(f"{where}: hidden_act {act!r} is not supported here; expected one of "
                              f"{sorted(ACT_FROM_HF)}")
    eps = float(values.get("layer_norm_eps", 1e-12))
    if eps != 1e-12:
        notes.append(f"layer_norm_eps {eps} is used here as 1e-12")
    if values.get("position_embedding_type", "absolute") != "absolute":
        raise ConversionError(f"{where}: position_embedding_type "
                              f"{values['position_embedding_type']!r} is not supported "
                              "(absolute only)")
    try:
        # No int()/float() here: "12", 12.7 or true must be refused, not rounded (from_dict).
        config = modeling.BertConfig.from_dict(dict(
            vocab_size=values["vocab_size"],
            hidden_size=values["hidden_size"],
            num_hidden_layers=values["num_hidden_layers"],
            num_attention_heads=values["num_attention_heads"],
            intermediate_size=values["intermediate_size"],
            hidden_act=ACT_FROM_HF[act],
            hidden_dropout_prob=values.get("hidden_dropout_prob", 0.1),
            attention_probs_dropout_prob=values.get("attention_probs_dropout_prob", 0.1),
            max_position_embeddings=values.get("max_position_embeddings", 512),
            type_vocab_size=values.get("type_vocab_size", 2),
            initializer_range=values.get("initializer_range", 0.02),
            # A key config.json leaves out means what it means to transformers: ElectraConfig's
            # default (embedding_size 128, not the hidden size); the weights' shapes are checked.
            embedding_size=values.get("embedding_size", HF_DEFAULT_EMBEDDING_SIZE)), where=where)
    except KeyError as e:
        raise ConversionError(f"{where}: missing required key {e.args[0]!r}") from None
    return config, notes


# -- whole models --------------------------------------------------------------------------------


def discriminator_to_hf(tensors: dict[str, np.ndarray],
                        config: modeling.BertConfig) -> dict[str, np.ndarray]:
    """ElectraForPreTraining parameters from our `electra/` and `discriminator_predictions/`
    (a GDES checkpoint's discriminator table is E_G + E_delta)."""
    return _convert(embedding_sharing.fold(tensors),
                    encoder_pairs(config, "electra") + discriminator_head_pairs(),
                    "discriminator export")


def generator_scopes(tensors: dict[str, np.ndarray]) -> tuple[str, str]:
    """(encoder scope, embedding scope) of the generator in a pre-training checkpoint.

    `generator/` when a separate generator exists (the default), else the discriminator
    `electra/` doubles as generator (untied_generator false, or the MLM-only objective); its
    embeddings are its own unless shared from `electra/embeddings`.
    """
    if not any(n.startswith("generator_predictions/") for n in tensors):
        raise ConversionError("the checkpoint has no generator_predictions/ head (uniform "
                              "generator?): nothing to export as a masked LM")
    scope = "generator" if any(n.startswith("generator/encoder/") for n in tensors) else "electra"
    emb = scope if f"{scope}/embeddings/word_embeddings" in tensors else "electra"
    return scope, emb


def generator_to_hf(tensors: dict[str, np.ndarray],
                    config: modeling.BertConfig) -> dict[str, np.ndarray]:
    """ElectraForMaskedLM parameters; `config` is the generator's (generator_config.json)."""
    scope, emb = generator_scopes(tensors)
    out = _convert(tensors, encoder_pairs(config, scope, emb) + generator_head_pairs(),
                   "generator export")
    # The output layer is the word-embedding table (tied, as in the official model).
    out["generator_lm_head.weight"] = out[f"{HF_PREFIX}.embeddings.word_embeddings.weight"].copy()
    return out


def classifier_shift(tensors: dict[str, np.ndarray], config: modeling.BertConfig,
                     scope: str = "electra") -> np.ndarray:
    """Per-unit shift putting every [CLS] value in GELU's identity range (module docstring)."""
    last = f"{scope}/encoder/layer_{config.num_hidden_layers - 1}/output/LayerNorm"
    gamma = np.abs(np.asarray(tensors[f"{last}/gamma"], np.float64))
    beta = np.asarray(tensors[f"{last}/beta"], np.float64)
    bound = gamma * math.sqrt(max(config.hidden_size - 1, 1))
    # Round up to a power of two: the shift then adds no mantissa noise of its own.
    shift = np.maximum(bound - beta, 0.0) + GELU_LINEAR_MARGIN
    return np.exp2(np.ceil(np.log2(shift))).astype(np.float32)


def _task_dense(tensors: dict[str, np.ndarray], config: modeling.BertConfig,
                task_name: str) -> tuple[np.ndarray, np.ndarray]:
    """(kernel [H, C], bias [C]) of the single-dense head `task_specific/<task>/dense`."""
    kernel_name = f"task_specific/{task_name}/dense/kernel"
    bias_name = f"task_specific/{task_name}/dense/bias"
    if kernel_name not in tensors or bias_name not in tensors:
        heads = sorted({n.split("/")[1] for n in tensors if n.startswith("task_specific/")})
        raise ConversionError(f"no single-dense head for task {task_name!r} (task heads in the "
                              f"checkpoint: {heads or 'none'})")
    kernel = np.asarray(tensors[kernel_name], np.float32)
    bias = np.asarray(tensors[bias_name], np.float32)
    if kernel.shape[0] != config.hidden_size:
        raise ConversionError(f"{kernel_name} has shape {list(kernel.shape)}; expected "
                              f"[{config.hidden_size}, num_labels]")
    return kernel, bias


def tagger_to_hf(tensors: dict[str, np.ndarray], config: modeling.BertConfig,
                 task_name: str) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """ElectraForTokenClassification: the official tagging head is the same per-token dense."""
    out = _convert(tensors, encoder_pairs(config, "electra"), "tagger export")
    kernel, bias = _task_dense(tensors, config, task_name)
    out["classifier.weight"] = np.ascontiguousarray(kernel.T)
    out["classifier.bias"] = bias
    return out, {HEAD_METADATA_KEY: json.dumps({"task": task_name})}


def classifier_to_hf(tensors: dict[str, np.ndarray], config: modeling.BertConfig,
                     task_name: str) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """ElectraForSequenceClassification parameters and safetensors metadata for one task head."""
    out = _convert(tensors, encoder_pairs(config, "electra"), "classifier export")
    kernel, bias = _task_dense(tensors, config, task_name)  # [H, C], [C]
    shift = classifier_shift(tensors, config)
    out["classifier.dense.weight"] = np.eye(config.hidden_size, dtype=np.float32)
    out["classifier.dense.bias"] = shift
    out["classifier.out_proj.weight"] = np.ascontiguousarray(kernel.T)
    out["classifier.out_proj.bias"] = (
        bias.astype(np.float64) - kernel.astype(np.float64).T @ shift.astype(np.float64)
    ).astype(np.float32)
    metadata = {HEAD_METADATA_KEY: json.dumps(
        {"task": task_name, "bias": [float(b) for b in bias]})}
    return out, metadata


# -- back to ours --------------------------------------------------------------------------------


def _normalise_hf_names(tensors: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Old HF checkpoints call LayerNorm parameters gamma/beta; from_pretrained renames them."""
    out = {}
    for name, value in tensors.items():
        name = re.sub(r"\.gamma$", ".weight", name)
        name = re.sub(r"\.beta$", ".bias", name)
        out[name] = value
    return out


def with_model_prefix(tensors: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A bare ElectraModel saves `embeddings.*`, `encoder.*`; the heads' models `electra.*`."""
    if any(n.startswith(f"{HF_PREFIX}.") for n in tensors):
        return tensors
    if "embeddings.word_embeddings.weight" not in tensors:
        return tensors
    return {f"{HF_PREFIX}.{n}": v for n, v in tensors.items()}


class Imported(NamedTuple):
    tensors: dict[str, np.ndarray]  # our names
    unused: list[str]  # HF parameters not mapped (buffers, an HF-layout classifier, ...)
    notes: list[str]


def check_shapes(hf: dict[str, np.ndarray], config: modeling.BertConfig, kind: str,
                 where: str = "config.json") -> None:
    """Refuses weights whose shapes (or number of layers) are not those `config` describes:
    a config.json of another model would otherwise surface much later, in fine-tuning."""
    labels = next((hf[n].shape[0] for n in ("classifier.out_proj.weight", "classifier.weight")
                   if n in hf and np.ndim(hf[n]) == 2), 2)
    expected = expected_hf_shapes(config, kind, labels)
    wrong = [f"{n} is {list(np.shape(hf[n]))}, config implies {list(shape)}"
             for n, shape in expected.items() if n in hf and tuple(np.shape(hf[n])) != shape]
    layers = {int(m.group(1)) for n in hf
              if (m := re.match(rf"{HF_PREFIX}\.encoder\.layer\.(\d+)\.", n))}
    if layers and max(layers) >= config.num_hidden_layers:
        wrong.append(f"the weights have {max(layers) + 1} layers, config num_hidden_layers is "
                     f"{config.num_hidden_layers}")
    if wrong:
        raise ConversionError(
            f"{where} does not describe these weights ({len(wrong)} mismatch(es): "
            + "; ".join(wrong[:4]) + (" ..." if len(wrong) > 4 else "")
            + "). Use the config.json saved with these weights")


def from_hf(hf_tensors: dict[str, np.ndarray], config: modeling.BertConfig, kind: str,
            scope: str = "electra", metadata: dict[str, str] | None = None,
            task_name: str | None = None, where: str = "config.json") -> Imported:
    """Our tensors from an HF ELECTRA state dict.

    kind "encoder": the encoder under `scope` only (any other ELECTRA model);
    "discriminator": encoder under `scope` + discriminator_predictions/ (if present);
    "generator": encoder under `scope` (e.g. "generator") + generator_predictions/;
    "classifier": encoder + task_specific/<task>/dense when the HF head is our exported
    identity+shift form (else the head is reported unused); "tagger": encoder +
    task_specific/<task>/dense from the token-classification layer.
    """
    hf = _normalise_hf_names(hf_tensors)
    check_shapes(hf, config, kind, where)
    pairs = encoder_pairs(config, scope)
    notes: list[str] = []
    if kind == "discriminator":
        head = discriminator_head_pairs()
        if all(p.hf in hf for p in head):
            pairs += head
        else:
            notes.append("no discriminator_predictions head in the HF weights: encoder only")
    elif kind == "generator":
        pairs += generator_head_pairs()
    elif kind not in ("classifier", "tagger", "encoder"):
        raise ConversionError(f"unknown model kind {kind!r}; expected one of "
                              f"{sorted(ARCHITECTURES)}")
    out = _convert_back(hf, pairs, f"{ARCHITECTURES.get(kind, 'ElectraModel')} import")
    used = {p.hf for p in pairs}
    if kind == "generator" and "generator_lm_head.weight" in hf:
        used.add("generator_lm_head.weight")
        if not np.array_equal(hf["generator_lm_head.weight"],
                              hf[f"{HF_PREFIX}.embeddings.word_embeddings.weight"]):
            notes.append("generator_lm_head.weight differs from the word embeddings; the output "
                         "layer here is tied to the embeddings (as ELECTRA), so it is dropped")
    if kind == "tagger":
        task = _head_task(metadata or {}, task_name)
        head = _convert_back(hf, _dense(f"task_specific/{task}/dense", "classifier"),
                             "ElectraForTokenClassification import")
        out.update(head)
        used |= {"classifier.weight", "classifier.bias"}
    if kind == "classifier":
        head, head_notes = _classifier_from_hf(hf, config, metadata or {}, task_name)
        notes += head_notes
        if head:
            out.update(head)
            used |= {f"classifier.{p}.{w}" for p in ("dense", "out_proj")
                     for w in ("weight", "bias")}
    for name, value in out.items():
        if value.dtype != np.float32:
            out[name] = value.astype(np.float32)
    unused = sorted(set(hf) - used)
    return Imported(out, unused, notes)


def _classifier_from_hf(hf: dict[str, np.ndarray], config: modeling.BertConfig,
                        metadata: dict[str, str],
                        task_name: str | None) -> tuple[dict[str, np.ndarray], list[str]]:
    names = ["classifier.dense.weight", "classifier.dense.bias", "classifier.out_proj.weight",
             "classifier.out_proj.bias"]
    if not all(n in hf for n in names):
        return {}, ["no ElectraClassificationHead parameters: encoder only"]
    dense_w, shift, out_w, out_b = (np.asarray(hf[n]) for n in names)
    if not np.array_equal(dense_w, np.eye(config.hidden_size, dtype=dense_w.dtype)):
        return {}, ["the classifier head has the Hugging Face layout (dense + GELU + out_proj), "
                    "which the official single-dense head cannot express: imported the encoder "
                    "only; fine-tune a new head here"]
    info = json.loads(metadata.get(HEAD_METADATA_KEY, "{}"))
    task = _head_task(metadata, task_name)
    kernel = np.ascontiguousarray(out_w.T).astype(np.float32)  # [H, C]
    bias = (out_b.astype(np.float64) + kernel.astype(np.float64).T @ shift.astype(np.float64))
    exact = info.get("bias")
    if exact is not None and len(exact) == bias.shape[0] and np.allclose(exact, bias, atol=1e-3):
        bias = np.asarray(exact, np.float64)  # ours before export, bit for bit
    head = {f"task_specific/{task}/dense/kernel": kernel,
            f"task_specific/{task}/dense/bias": bias.astype(np.float32)}
    return head, []


def _head_task(metadata: dict[str, str], task_name: str | None) -> str:
    task = task_name or json.loads(metadata.get(HEAD_METADATA_KEY, "{}")).get("task")
    if not task:
        raise ConversionError("the head's task name is unknown: pass --task (it names the "
                              "head's variables task_specific/<task>/)")
    return task


def expected_hf_shapes(config: modeling.BertConfig, kind: str,
                       num_labels: int = 2) -> dict[str, tuple[int, ...]]:
    """HF parameter name -> shape for a model of `kind` (what `*_to_hf` must produce)."""
    e, h, v = config.embedding_size, config.hidden_size, config.vocab_size
    shapes: dict[str, tuple[int, ...]] = {
        f"{HF_PREFIX}.embeddings.word_embeddings.weight": (v, e),
        f"{HF_PREFIX}.embeddings.position_embeddings.weight": (config.max_position_embeddings, e),
        f"{HF_PREFIX}.embeddings.token_type_embeddings.weight": (config.type_vocab_size, e),
        f"{HF_PREFIX}.embeddings.LayerNorm.weight": (e,),
        f"{HF_PREFIX}.embeddings.LayerNorm.bias": (e,),
    }
    if e != h:
        shapes[f"{HF_PREFIX}.embeddings_project.weight"] = (h, e)
        shapes[f"{HF_PREFIX}.embeddings_project.bias"] = (h,)
    f = config.intermediate_size
    for i in range(config.num_hidden_layers):
        p = f"{HF_PREFIX}.encoder.layer.{i}"
        for part in ("query", "key", "value"):
            shapes[f"{p}.attention.self.{part}.weight"] = (h, h)
            shapes[f"{p}.attention.self.{part}.bias"] = (h,)
        shapes[f"{p}.attention.output.dense.weight"] = (h, h)
        shapes[f"{p}.attention.output.dense.bias"] = (h,)
        shapes[f"{p}.attention.output.LayerNorm.weight"] = (h,)
        shapes[f"{p}.attention.output.LayerNorm.bias"] = (h,)
        shapes[f"{p}.intermediate.dense.weight"] = (f, h)
        shapes[f"{p}.intermediate.dense.bias"] = (f,)
        shapes[f"{p}.output.dense.weight"] = (h, f)
        shapes[f"{p}.output.dense.bias"] = (h,)
        shapes[f"{p}.output.LayerNorm.weight"] = (h,)
        shapes[f"{p}.output.LayerNorm.bias"] = (h,)
    if kind == "discriminator":
        shapes.update({"discriminator_predictions.dense.weight": (h, h),
                       "discriminator_predictions.dense.bias": (h,),
                       "discriminator_predictions.dense_prediction.weight": (1, h),
                       "discriminator_predictions.dense_prediction.bias": (1,)})
    elif kind == "generator":
        shapes.update({"generator_predictions.dense.weight": (e, h),
                       "generator_predictions.dense.bias": (e,),
                       "generator_predictions.LayerNorm.weight": (e,),
                       "generator_predictions.LayerNorm.bias": (e,),
                       "generator_lm_head.weight": (v, e), "generator_lm_head.bias": (v,)})
    elif kind == "tagger":
        shapes.update({"classifier.weight": (num_labels, h), "classifier.bias": (num_labels,)})
    elif kind == "classifier":
        shapes.update({"classifier.dense.weight": (h, h), "classifier.dense.bias": (h,),
                       "classifier.out_proj.weight": (num_labels, h),
                       "classifier.out_proj.bias": (num_labels,)})
    return shapes
