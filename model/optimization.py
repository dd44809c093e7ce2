"""AdamW optimizer, learning-rate schedule and layer-wise learning rates (Keras-free).

Reproduces the optimizer of the official ELECTRA release (model/optimization.py there) by default,
including three known quirks, each of which can be switched to the corrected behaviour:

- Adam without bias correction            -> `AdamWeightDecay(bias_correction=True)`
- warm-up on top of a decay from step 0    -> `learning_rate_schedule(..., decay_after_warmup=True)`
- layer-wise decay exponent one too large  -> `layerwise_lr_multipliers(..., official=False)`

Keep the defaults to reproduce published numbers; short runs (tests, demos, small budgets) train
better with the corrected Adam (see shared/CALIBRATION.md).
"""

import re
from typing import Callable, Dict, Iterable, Optional, Sequence, Tuple, Union

import tensorflow as tf

from model import layers
from util.checkpoint import checkpoint_name

# Substrings (regular expressions, searched as the official code does) of variable names that get no
# weight decay: LayerNorm scales/offsets and every bias (this includes `output_bias`).
DEFAULT_EXCLUDE_FROM_WEIGHT_DECAY = ("LayerNorm", "layer_norm", "bias")

# Assigning in replica context (inside strategy.run, gradients already all-reduced) is only legal
# for variables whose aggregation says which replica's value wins; all replicas compute the same
# update, so the first one's is taken.
_AGGREGATION = tf.VariableAggregation.ONLY_FIRST_REPLICA

LearningRate = Union[float, Callable[[tf.Tensor], tf.Tensor]]

# True: each variable's update (clipping scale, moments, Adam direction, decay, step) is one
# XLA-compiled pass over memory instead of a dozen graph ops each reading and writing the whole
# tensor; the same arithmetic in the same order. False: graph ops (benchmarks/ab_step.py measures
# the difference). A model whose variables are all smaller than model/layers.py's
# MIN_FUSED_ELEMENTS (the tiny models of tests) runs the same function uncompiled: compiling it
# per variable shape costs more than fusing saves on so few elements in a short run. Read when a
# step is traced.
FUSE_UPDATE = True


# ----------------------------------------------------------------------------------------------
# Learning-rate schedule
# ----------------------------------------------------------------------------------------------


def learning_rate_schedule(
    step: Union[int, tf.Tensor],
    learning_rate: float,
    num_train_steps: int,
    num_warmup_steps: int = 0,
    warmup_proportion: float = 0.0,
    lr_decay_power: float = 1.0,
    decay_after_warmup: bool = False,
) -> tf.Tensor:
    """Learning rate at `step` (a pure function of the step; safe in tf.function and XLA).

    The warm-up length is `max(num_train_steps * warmup_proportion, num_warmup_steps)`, as in the
    official release (pre-training sets `num_warmup_steps`, fine-tuning `warmup_proportion`).

    Official behaviour (`decay_after_warmup=False`, the default): a polynomial decay from
    `learning_rate` at step 0 to 0 at `num_train_steps` (power `lr_decay_power`), multiplied by
    `min(1, step / warmup_steps)`. The decay therefore already runs during warm-up and the peak is
    below `learning_rate` (e.g. 0.9 * lr with 10% warm-up and linear decay). ELECTRA inherited this
    from BERT; see google-research/bert issue 193, where decay and warm-up overlapping is asked
    about. Corrected behaviour (`decay_after_warmup=True`): linear warm-up from 0 to
    `learning_rate` at `warmup_steps`, then the polynomial decay runs over the remaining
    `num_train_steps - warmup_steps` steps and reaches 0 at `num_train_steps`.

    Both clamp at 0 after `num_train_steps`. With no warm-up (warmup_steps == 0) the warm-up factor
    is 1; the official code would divide 0 by 0 at step 0 and return NaN there.

    Args:
      step: int scalar (Python int or tensor), the number of updates already applied.
      learning_rate: peak learning rate.
      num_train_steps: total number of updates; the rate is 0 from there on.
      num_warmup_steps: warm-up length in steps.
      warmup_proportion: warm-up length as a fraction of num_train_steps.
      lr_decay_power: power of the polynomial decay (1.0 = linear).
      decay_after_warmup: False = official schedule, True = corrected schedule.

    Returns:
      float32 scalar tensor.

    Raises:
      ValueError: num_train_steps < 1, a negative warm-up, or a negative decay power.
    """
    if num_train_steps < 1:
        raise ValueError(f"num_train_steps must be >= 1, got {num_train_steps}.")
    if num_warmup_steps < 0 or warmup_proportion < 0:
        raise ValueError(
            f"num_warmup_steps and warmup_proportion must be >= 0, got {num_warmup_steps} and "
            f"{warmup_proportion}."
        )
    if lr_decay_power < 0:
        raise ValueError(f"lr_decay_power must be >= 0, got {lr_decay_power}.")
    warmup_steps = float(max(num_train_steps * warmup_proportion, num_warmup_steps))
    step = tf.cast(step, tf.float32)
    peak = tf.constant(learning_rate, tf.float32)

    if warmup_steps > 0:
        warmup_factor = tf.minimum(1.0, step / warmup_steps)
    else:
        warmup_factor = tf.constant(1.0, tf.float32)

    if not decay_after_warmup:
        # Official: decay counted from step 0, warm-up multiplied on top.
        progress = tf.minimum(step, float(num_train_steps)) / float(num_train_steps)
        return peak * tf.pow(1.0 - progress, lr_decay_power) * warmup_factor

    # Corrected: warm-up to the peak, then decay over what is left. max(.., 1) only guards a
    # warm-up as long as training, where the decay phase is never reached anyway.
    decay_steps = max(float(num_train_steps) - warmup_steps, 1.0)
    progress = tf.clip_by_value((step - warmup_steps) / decay_steps, 0.0, 1.0)
    decayed = peak * tf.pow(1.0 - progress, lr_decay_power)
    return tf.where(step < warmup_steps, peak * warmup_factor, decayed)


# ----------------------------------------------------------------------------------------------
# Layer-wise learning-rate decay
# ----------------------------------------------------------------------------------------------


def _layer_depths(num_layers: int, official: bool) -> Dict[str, int]:
    """Name substring -> depth; embeddings are depth 0, encoder layer i is depth i + 1."""
    depths = {"/embeddings/": 0, "/embeddings_project/": 0}
    for i in range(num_layers):
        # The trailing "/" keeps "encoder/layer_1/" from matching "encoder/layer_10/".
        depths[f"encoder/layer_{i}/"] = i + 1
    # Official: heads sit at depth num_layers + 2, a left-over from when ELECTRA had a pooler
    # layer between the encoder and the heads (google-research/electra issues 51 and 64).
    depths["task_specific/"] = num_layers + 2 if official else num_layers + 1
    return depths


def layerwise_lr_multipliers(
    variable_names: Iterable[Union[str, tf.Variable]],
    layerwise_lr_decay: float,
    num_layers: int,
    official: bool = True,
) -> Dict[str, float]:
    """Per-variable learning-rate multipliers for layer-wise decay (fine-tuning).

    A variable is assigned a depth by substring of its name: "/embeddings/" and
    "/embeddings_project/" depth 0, "encoder/layer_{i}/" depth i + 1, "task_specific/" the top.
    Its multiplier is `layerwise_lr_decay ** (top - depth)`.

    Official (`official=True`, default): top = num_layers + 2, so the heads get decay^0, the last
    encoder layer decay^2, ..., the embeddings decay^(num_layers + 2). The ELECTRA authors
    confirmed this exponent is one too large (google-research/electra issue 51, duplicated by
    issue 64): it dates from a removed pooler layer, and the intent is that the heads count as one
    extra layer, the last encoder layer getting decay^1.
    Corrected (`official=False`): top = num_layers + 1, so the heads get decay^0, the last encoder
    layer decay^1, ..., the embeddings decay^(num_layers + 1) -- the authors' stated intent.

    As in the official code, a name that matches none of the substrings is an error (the official
    optimizer raises "No learning rate specified for variable"), and so is a name that matches two
    (the official code would build its slots twice and fail).

    Args:
      variable_names: names (":0" suffix optional) or the variables themselves.
      layerwise_lr_decay: decay factor per layer, e.g. 0.8.
      num_layers: number of transformer layers of the encoder.
      official: True = official exponent, False = corrected exponent.

    Returns:
      dict: variable name (without ":0") -> float multiplier.

    Raises:
      ValueError: a name matches no key or more than one key, or bad decay/num_layers.
    """
    if not 0.0 < layerwise_lr_decay <= 1.0:
        raise ValueError(f"layerwise_lr_decay must be in (0, 1], got {layerwise_lr_decay}.")
    if num_layers < 0:
        raise ValueError(f"num_layers must be >= 0, got {num_layers}.")
    depths = _layer_depths(num_layers, official)
    top = depths["task_specific/"]
    multipliers = {}
    unmatched = []
    for item in variable_names:
        name = checkpoint_name(item)
        keys = [key for key in depths if key in name]
        if not keys:
            unmatched.append(name)
            continue
        if len(keys) > 1:
            raise ValueError(
                f"Variable {name!r} matches several layer-wise keys {keys}; rename it so it "
                f"matches exactly one."
            )
        multipliers[name] = float(layerwise_lr_decay ** (top - depths[keys[0]]))
    if unmatched:
        raise ValueError(
            f"No layer-wise learning rate for variables {unmatched}: names must contain one of "
            f"{list(depths)}."
        )
    return multipliers


# ----------------------------------------------------------------------------------------------
# Optimizer
# ----------------------------------------------------------------------------------------------


class AdamWeightDecay(tf.Module):
    """Adam with decoupled weight decay, as the official ELECTRA/BERT AdamWeightDecayOptimizer.

    One update, per variable p with gradient g (after global-norm clipping):
        m = beta_1 * m + (1 - beta_1) * g
        v = beta_2 * v + (1 - beta_2) * g^2
        update = m / (sqrt(v) + eps)                        # official: no bias correction
        update = m_hat / (sqrt(v_hat) + eps)                # bias_correction=True, with
                                                            # m_hat = m / (1 - beta_1^t), same for v
        update += weight_decay_rate * p                     # unless the name is excluded
        p -= lr(step) * multiplier(p) * update

    `bias_correction=False` (default) is the official behaviour: BERT's authors called the missing
    correction an oversight that a long warm-up hides (google-research/bert issue 153).

    State: `global_step` (int64 scalar, variable name "global_step", counts applied updates; the
    learning-rate schedule reads it) and two float32 slots per variable named `<name>/adam_m` and
    `<name>/adam_v`, the official checkpoint names. All are tf.Variables with
    ONLY_FIRST_REPLICA aggregation, so `apply` may run inside `strategy.run` on gradients that are
    already all-reduced. `.variables` (from tf.Module) lists them all for checkpointing.

    Usage: construct (under `strategy.scope()` when distributing), call `build(variables)` once
    outside any tf.function, then call `apply(grads, variables)` in the (compiled) train step.
    """

    def __init__(
        self,
        learning_rate: LearningRate,
        weight_decay_rate: float = 0.01,
        beta_1: float = 0.9,
        beta_2: float = 0.999,
        epsilon: float = 1e-6,
        exclude_from_weight_decay: Sequence[str] = DEFAULT_EXCLUDE_FROM_WEIGHT_DECAY,
        clip_norm: Optional[float] = 1.0,
        bias_correction: bool = False,
        lr_multipliers: Optional[Dict[str, float]] = None,
        name: str = "AdamWeightDecay",
    ):
        """Creates the optimizer and its step counter (slots come with `build`).

        Args:
          learning_rate: a float, or a function step -> float32 scalar tensor (the step is the
            int64 `global_step` value before this update), e.g. a partial of
            `learning_rate_schedule`.
          weight_decay_rate: decoupled weight decay; 0 disables it.
          beta_1, beta_2, epsilon: Adam hyperparameters (official values by default).
          exclude_from_weight_decay: regular expressions; a variable whose name matches any of
            them gets no weight decay.
          clip_norm: global-norm clipping threshold (tf.clip_by_global_norm); None disables it.
          bias_correction: False = official Adam without bias correction, True = standard Adam.
          lr_multipliers: optional variable name (without ":0") -> learning-rate multiplier, e.g.
            from `layerwise_lr_multipliers`. When given, every built variable needs an entry.
          name: module name.

        Raises:
          ValueError: a hyperparameter out of range.
        """
        super().__init__(name=name)
        for key, value, low, high in (
            ("beta_1", beta_1, 0.0, 1.0),
            ("beta_2", beta_2, 0.0, 1.0),
        ):
            if not low <= value < high:
                raise ValueError(f"{key} must be in [{low}, {high}), got {value}.")
        if epsilon <= 0:
            raise ValueError(f"epsilon must be > 0, got {epsilon}.")
        if weight_decay_rate < 0:
            raise ValueError(f"weight_decay_rate must be >= 0, got {weight_decay_rate}.")
        if clip_norm is not None and clip_norm <= 0:
            raise ValueError(f"clip_norm must be > 0 or None, got {clip_norm}.")
        self._learning_rate = learning_rate
        self.weight_decay_rate = float(weight_decay_rate)
        self.beta_1 = float(beta_1)
        self.beta_2 = float(beta_2)
        self.epsilon = float(epsilon)
        self.exclude_from_weight_decay = tuple(exclude_from_weight_decay)
        self.clip_norm = clip_norm
        self.bias_correction = bool(bias_correction)
        self.lr_multipliers = dict(lr_multipliers) if lr_multipliers is not None else None
        with tf.name_scope(""):  # root scope: the name is exactly "global_step", as official
            self.global_step = tf.Variable(
                tf.constant(0, tf.int64),
                trainable=False,
                name="global_step",
                aggregation=_AGGREGATION,
            )
        # Variable name -> (adam_m, adam_v); string keys keep tf.Module's variable tracking happy.
        self._slots: Dict[str, Tuple[tf.Variable, tf.Variable]] = {}
        # Variable name -> reference of the variable the slots were built for.
        self._built_for: Dict[str, object] = {}

    # -- construction ---------------------------------------------------------------------------

    @property
    def built(self) -> bool:
        return bool(self._slots)

    def build(self, variables: Sequence[tf.Variable]) -> None:
        """Creates the two float32 slots of every variable (once; call outside tf.function).

        Raises:
          ValueError: called twice, duplicate variable names, or a variable missing from
            lr_multipliers.
        """
        if self.built:
            raise ValueError(f"{self.name} is already built for {len(self._slots)} variables.")
        names = [checkpoint_name(v) for v in variables]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(
                f"Variable names must be unique (slots and checkpoints use them): {duplicates}."
            )
        if self.lr_multipliers is not None:
            missing = [n for n in names if n not in self.lr_multipliers]
            if missing:
                raise ValueError(f"lr_multipliers has no entry for variables {missing}.")
        # Lift out of any tf.function being traced so the slots are created once, eagerly.
        with tf.init_scope():
            for name, var in zip(names, variables):
                # The absolute scope "<name>/" makes the slot names exact whatever the caller's
                # name scope: "<name>/adam_m", "<name>/adam_v".
                with tf.name_scope(name + "/"):
                    slots = tuple(
                        tf.Variable(
                            tf.zeros(var.shape, tf.float32),
                            trainable=False,
                            name=slot,
                            aggregation=_AGGREGATION,
                        )
                        for slot in ("adam_m", "adam_v")
                    )
                self._slots[name] = slots
                self._built_for[name] = var.ref()

    def get_slot(self, var: Union[str, tf.Variable], slot: str) -> tf.Variable:
        """The "adam_m" or "adam_v" slot of a built variable."""
        m, v = self._slots[checkpoint_name(var)]
        return {"adam_m": m, "adam_v": v}[slot]

    # -- learning rate --------------------------------------------------------------------------

    def learning_rate(self, step: Optional[tf.Tensor] = None) -> tf.Tensor:
        """The base learning rate (before multipliers) at `step` (default: the current step)."""
        if step is None:
            step = self.global_step.read_value()
        if callable(self._learning_rate):
            return tf.cast(self._learning_rate(step), tf.float32)
        return tf.constant(self._learning_rate, tf.float32)

    def _use_weight_decay(self, name: str) -> bool:
        if not self.weight_decay_rate:
            return False
        return not any(re.search(pattern, name) for pattern in self.exclude_from_weight_decay)

    # -- update ---------------------------------------------------------------------------------

    def apply(self, grads: Sequence[Optional[tf.Tensor]], variables: Sequence[tf.Variable],
              global_norm: Optional[tf.Tensor] = None, only_if: Optional[tf.Tensor] = None):
        """Clips `grads` by global norm, applies one AdamW update, increments global_step.

        Gradients that are None are skipped (their variables and slots are left unchanged), as in
        the official code. Builds the slots on first use if `build` was not called (works eagerly
        and in tf.function, but call `build` first under a distribution strategy or XLA).

        Args:
          grads: one gradient (tensor, IndexedSlices or None) per variable.
          variables: the variables to update; all must have been built.
          global_norm: the global norm of the (dense) gradients when the caller has it
            already (tf.linalg.global_norm of the same tensors); computed here otherwise.
          only_if: a boolean scalar tensor; False leaves every variable, slot and global_step
            as they were (the update is computed and discarded, so a step needs no tf.cond).

        Returns:
          float32 scalar: the global norm of the gradients before clipping (for logging).

        Raises:
          ValueError: lengths differ, or a variable the optimizer was not built for.
        """
        pairs = self._pairs_to_update(grads, variables)
        increment = 1 if only_if is None else tf.cast(only_if, self.global_step.dtype)
        if not pairs:
            self.global_step.assign_add(increment)
            return tf.constant(0.0, tf.float32)
        # Dense before the norm and clipping, as the official TPU code (docs/FIDELITY.md).
        raw = [tf.cast(tf.convert_to_tensor(g), tf.float32) for g, _ in pairs]
        if global_norm is None:
            global_norm = tf.linalg.global_norm(raw)
        scale = self._clip_scale(global_norm)
        step = self.global_step.read_value()
        lr = self.learning_rate(step)
        corrections = self._bias_corrections(step)
        self._update_each(raw, pairs, _pick_update_fn(pairs), scale, lr, corrections, only_if)
        self.global_step.assign_add(increment)
        return global_norm

    def _pairs_to_update(self, grads, variables) -> list:
        """(gradient, variable) for each gradient that is not None, the slots built on first use.

        Raises:
          ValueError: lengths differ, or a variable the optimizer was not built for.
        """
        grads, variables = list(grads), list(variables)
        if len(grads) != len(variables):
            raise ValueError(f"Got {len(grads)} gradients for {len(variables)} variables.")
        if not self.built:
            self.build(variables)
        pairs = [(g, v) for g, v in zip(grads, variables) if g is not None]
        for _, var in pairs:
            name = checkpoint_name(var)
            if self._built_for.get(name) != var.ref():
                raise ValueError(
                    f"{self.name} was not built for variable {name!r}; pass every trained "
                    f"variable to build()."
                )
        return pairs

    def _clip_scale(self, global_norm: tf.Tensor) -> Optional[tf.Tensor]:
        """The factor that clips the gradients to clip_norm, None without clipping."""
        if self.clip_norm is None:
            return None
        # As tf.clip_by_global_norm computes it: a non-finite norm makes the scale NaN.
        one = tf.constant(1.0, tf.float32)
        return (self.clip_norm * tf.minimum(one / global_norm, one / self.clip_norm)
                + (global_norm - global_norm))

    def _bias_corrections(self, step: tf.Tensor) -> Optional[Tuple[tf.Tensor, tf.Tensor]]:
        """Adam's two bias corrections for the update at `step`, None without them."""
        if not self.bias_correction:
            return None
        t = tf.cast(step + 1, tf.float32)  # this update is the t-th, t >= 1
        return 1.0 - tf.pow(self.beta_1, t), 1.0 - tf.pow(self.beta_2, t)

    def _update_each(self, raw, pairs, update_fn, scale, lr, corrections, only_if) -> None:
        """Assigns each variable and its slots their updated values."""
        # One product per distinct multiplier (a layer's variables share theirs), not per
        # variable: fewer ops to trace, the same values.
        scaled_lr = {}
        for grad, (_, var) in zip(raw, pairs):
            name = checkpoint_name(var)
            m, v = self._slots[name]
            var_lr = lr
            if self.lr_multipliers is not None:
                multiplier = self.lr_multipliers[name]
                if multiplier not in scaled_lr:
                    scaled_lr[multiplier] = lr * multiplier
                var_lr = scaled_lr[multiplier]
            decay = self.weight_decay_rate if self._use_weight_decay(name) else None
            # Values, not variables, enter the compiled function (model/layers.py
            # elementwise_block says why).
            param, next_m, next_v = update_fn(
                tf.convert_to_tensor(var), tf.convert_to_tensor(m), tf.convert_to_tensor(v),
                grad, scale, var_lr, corrections, only_if, self.beta_1, self.beta_2, self.epsilon,
                decay)
            var.assign(tf.cast(param, var.dtype))
            m.assign(next_m)
            v.assign(next_v)

    def apply_gradients(self, grads_and_vars: Iterable[Tuple[Optional[tf.Tensor], tf.Variable]]):
        """Same as `apply`, taking (gradient, variable) pairs."""
        pairs = list(grads_and_vars)
        return self.apply([g for g, _ in pairs], [v for _, v in pairs])


def _pick_update_fn(pairs):
    """The eager, traced or compiled form of the per-variable update (the same arithmetic)."""
    if not FUSE_UPDATE:
        return _adamw_update
    if any(var.shape.num_elements() >= layers.MIN_FUSED_ELEMENTS for _, var in pairs):
        return _compiled_adamw_update
    return _traced_adamw_update


def _adamw_update(param, m, v, grad, scale, lr, corrections, only_if, beta_1: float,
                  beta_2: float, epsilon: float, decay: Optional[float]):
    """One AdamW update of one variable (AdamWeightDecay's docstring): (param, m, v) after it.
    `scale`: the clipping factor or None; `corrections`: Adam's bias corrections or None;
    `only_if`: None, or a boolean scalar: False returns (param, m, v) unchanged; `decay`: the
    weight-decay rate, None for excluded variables."""
    if scale is not None:
        grad = grad * scale
    param = tf.cast(param, tf.float32)
    next_m = beta_1 * m + (1.0 - beta_1) * grad
    next_v = beta_2 * v + (1.0 - beta_2) * tf.square(grad)
    if corrections is not None:
        update = (next_m / corrections[0]) / (tf.sqrt(next_v / corrections[1]) + epsilon)
    else:
        update = next_m / (tf.sqrt(next_v) + epsilon)
    # Decoupled decay: added to the Adam direction, so it never enters m or v.
    if decay is not None:
        update += decay * param
    next_param = param - lr * update
    if only_if is None:
        return next_param, next_m, next_v
    # A skipped step (non-finite gradients): what they gave is discarded, exactly.
    return (tf.where(only_if, next_param, param), tf.where(only_if, next_m, m),
            tf.where(only_if, next_v, v))


_compiled_adamw_update = tf.function(_adamw_update, jit_compile=True, autograph=False)
# Graph ops traced once per process and variable shape, then one call node per variable.
_traced_adamw_update = tf.function(_adamw_update, autograph=False)


def create_optimizer(
    variables: Sequence[tf.Variable],
    learning_rate: float,
    num_train_steps: int,
    weight_decay_rate: float = 0.01,
    num_warmup_steps: int = 0,
    warmup_proportion: float = 0.0,
    lr_decay_power: float = 1.0,
    layerwise_lr_decay: float = -1.0,
    num_layers: Optional[int] = None,
    clip_norm: Optional[float] = 1.0,
    bias_correction: bool = False,
    decay_after_warmup: bool = False,
    official_layerwise: bool = True,
) -> AdamWeightDecay:
    """An AdamWeightDecay with the schedule and (optional) layer-wise decay, built for `variables`.

    Mirrors the official create_optimizer: `layerwise_lr_decay <= 0` disables layer-wise decay
    (pre-training), otherwise `num_layers` is required. The three `bias_correction`,
    `decay_after_warmup` and `official_layerwise` switches select official or corrected behaviour
    (see the module docstring). Call under `strategy.scope()` when distributing.
    """
    multipliers = None
    if layerwise_lr_decay > 0:
        if num_layers is None:
            raise ValueError("num_layers is required when layerwise_lr_decay > 0.")
        multipliers = layerwise_lr_multipliers(
            variables, layerwise_lr_decay, num_layers, official=official_layerwise
        )

    def schedule(step):
        return learning_rate_schedule(
            step,
            learning_rate,
            num_train_steps,
            num_warmup_steps=num_warmup_steps,
            warmup_proportion=warmup_proportion,
            lr_decay_power=lr_decay_power,
            decay_after_warmup=decay_after_warmup,
        )

    optimizer = AdamWeightDecay(
        schedule,
        weight_decay_rate=weight_decay_rate,
        clip_norm=clip_norm,
        bias_correction=bias_correction,
        lr_multipliers=multipliers,
    )
    optimizer.build(variables)
    return optimizer
