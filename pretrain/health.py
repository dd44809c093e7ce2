"""Is a pre-training run learning? Named states read off its eval history, each with what is
wrong, its likely causes (saying which were measured on this project's machine) and what to try,
in words fitted to the run's objective and generator (`State.advice`).

Pure logic (numpy only, no TensorFlow), so tests drive it with synthetic histories and the demo
imports it cheaply. pretrain/evaluation.py feeds it every eval's metrics (pretrain_metrics.py plus
`token_geometry` of the discriminator's last layer on held-out text); pretrain/loop.py feeds it
the learning rate after every block of steps, and, every health_every_steps, the training
batches' own figures (pretrain_metrics.train_health_figures and the block's masked-LM loss): the
TRAIN_CHECKED states are then watched in every run, with evals or without.

A state's `test(history, run)` looks at the evals so far (oldest first, each a metrics dict with
`global_step`); `Monitor` keeps which states are active, logs each change once, and gives the
`health` entry of the results: {state name: step it began} for the states active now.
The thresholds and the figures quoted in `causes` come from the calibration runs in
docs/PRETRAINING.md, "Reading a run".
"""
import dataclasses
import logging
import math
from typing import Callable, Iterable, Mapping, Sequence

import numpy as np

log = logging.getLogger(__name__)


# What fills the masked positions, as far as the checks and their advice care.
LEARNED = "learned"  # a masked-LM or Electric two-tower generator: its width and temperature set
FROZEN = "frozen"  # two-stage, stage 2: a trained generator of the discriminator's width
RANDOM = "random"  # uniform or unigram samples: no width, no temperature, nothing to learn
GENERATOR_KINDS = (LEARNED, FROZEN, RANDOM)


@dataclasses.dataclass(frozen=True)
class RunFacts:
    """What the checks, and the advice they print, need to know of a run's settings."""
    num_train_steps: int
    num_warmup_steps: int
    # ELECTRA/Electric. False for the masked-LM objectives (BERT, Replace MLM, All-Tokens MLM),
    # whose masked-LM figures are the main model's, not a generator's.
    has_discriminator: bool = True
    generator: str = LEARNED
    electra_15: bool = False  # the discriminator learns only at the masked positions
    vocab_size: int = 30522

    def __post_init__(self):
        if self.generator not in GENERATOR_KINDS:
            raise ValueError(f"generator {self.generator!r} is not one of {GENERATOR_KINDS}")

    @property
    def learned_generator(self) -> bool:
        return self.generator != RANDOM

    @classmethod
    def of(cls, config) -> "RunFacts":
        """From a PretrainingConfig."""
        return cls.from_settings(config.to_dict())

    @classmethod
    def from_settings(cls, settings: Mapping) -> "RunFacts":
        """From a run's hparams as pretrain_config.json keeps them (missing keys: defaults)."""
        get = lambda key, default=False: settings.get(key, default)  # noqa: E731
        generator = (RANDOM if get("uniform_generator") or get("unigram_generator")
                     else FROZEN if get("freeze_generator") else LEARNED)
        return cls(int(get("num_train_steps", 1000000)), int(get("num_warmup_steps", 10000)),
                   has_discriminator=bool(get("electra_objective", True)
                                          or get("electric_objective")),
                   generator=generator, electra_15=bool(get("electra_15")),
                   vocab_size=int(get("vocab_size", 30522)))


# -- measured thresholds (docs/PRETRAINING.md, "Reading a run") ---------------------------------

# Discriminator at one answer: it calls almost nothing replaced (below STALL_POSITIVE_SHARE of the
# base rate), or almost everything (the tokens it calls original below that share of the
# originals), and ranks real tokens little better than chance (AUC over real tokens below
# STALL_AUC).
STALL_POSITIVE_SHARE = 0.1
STALL_AUC = 0.70
# Read from DISC_GRACE_STEPS after warm-up on: a discriminator starts at one answer and chance
# ranking, and the healthy tiny real-text runs of benchmarks/health_grace.py (warm-ups of 0, 5
# and 20 steps, an eval every 5) were still there up to 5 steps after warm-up, out of it from 10
# after (real-token AUC 0.72-0.76 there, 0.78-0.85 at 15). Twice that is the grace; two evals in
# a row would not do, since at that spacing the false alarm lasted two evals.
DISC_GRACE_STEPS = 20
# Collapse (after warm-up): last-layer token vectors of held-out text nearly parallel, or a hidden
# dimension whose spread across tokens is near zero next to the median dimension's.
COLLAPSE_COSINE = 0.99
DEAD_DIMENSION_SPREAD = 0.08
# Generator too strong: fewer than this share of real tokens replaced (with 15% masked, its samples
# match the original at 2/3 of the masked positions). The paper met it at large scale (ELECTRA-Large
# masks 25% for that reason); tiny runs here keep 13-15% replaced.
FEW_REPLACED = 0.05
# Generator learning nothing: GENERATOR_GRACE_STEPS after warm-up, its held-out masked-LM loss
# still above this share of ln(vocab_size), the loss of a uniform guess.
IDLE_GENERATOR_LOSS = 0.9
GENERATOR_GRACE_STEPS = 100
# Loss rising: the held-out masked-LM loss above its lowest value by RISE_MARGIN (relative) at
# RISE_EVALS evals in a row.
RISE_MARGIN = 0.05
RISE_EVALS = 3


def _after_warmup(entry: Mapping, run: RunFacts) -> bool:
    return entry["global_step"] > run.num_warmup_steps


def _latest(history: Sequence[Mapping]) -> Mapping:
    return history[-1] if history else {}


def _not_finite(history, run) -> bool:
    latest = _latest(history)
    return any(key in latest and not math.isfinite(latest[key])
               for key in ("loss", "masked_lm_loss", "disc_loss"))


def _disc_at_chance(latest: Mapping, run: RunFacts) -> bool:
    """A discriminator past its grace that ranks real tokens little better than chance."""
    return (run.has_discriminator and "disc_auc_real" in latest
            and latest["global_step"] >= run.num_warmup_steps + DISC_GRACE_STEPS
            and latest["disc_auc_real"] < STALL_AUC)


def _disc_stalled(history, run) -> bool:
    latest = _latest(history)
    return _disc_at_chance(latest, run) and \
        latest["disc_positive_rate"] < STALL_POSITIVE_SHARE * latest["disc_replaced_rate"]


def _disc_all_replaced(history, run) -> bool:
    latest = _latest(history)
    return _disc_at_chance(latest, run) and \
        1 - latest["disc_positive_rate"] < STALL_POSITIVE_SHARE * (1 - latest["disc_replaced_rate"])


def _collapsed(history, run) -> bool:
    latest = _latest(history)
    if "repr_mean_cosine" not in latest:
        return False
    return _after_warmup(latest, run) and (latest["repr_mean_cosine"] > COLLAPSE_COSINE
                                           or latest["repr_min_dim_spread"] < DEAD_DIMENSION_SPREAD)


def _generator_too_strong(history, run) -> bool:
    latest = _latest(history)
    return (run.has_discriminator and run.learned_generator and "disc_replaced_rate" in latest
            and latest["disc_replaced_rate"] < FEW_REPLACED)


def _generator_idle(history, run) -> bool:
    latest = _latest(history)
    return (run.learned_generator and "masked_lm_loss" in latest
            and latest["global_step"] >= run.num_warmup_steps + GENERATOR_GRACE_STEPS
            and latest["masked_lm_loss"] > IDLE_GENERATOR_LOSS * math.log(run.vocab_size))


def _loss_rising(history, run) -> bool:
    losses = [h["masked_lm_loss"] for h in history
              if "masked_lm_loss" in h and math.isfinite(h["masked_lm_loss"])]
    if len(losses) <= RISE_EVALS:
        return False
    lowest = min(losses[:-RISE_EVALS])
    return all(loss > lowest * (1 + RISE_MARGIN) for loss in losses[-RISE_EVALS:])


# The kinds of run whose advice differs from the default (a learned generator feeding a
# discriminator trained on every token); a run's kinds come from `run_kinds`.
MASKED_LM = "masked_lm"  # no discriminator: the masked-LM figures are the main model's
ELECTRA_15 = "electra_15"


def run_kinds(run: RunFacts) -> list[str]:
    """The kinds `run` belongs to, most specific first (keys of State.variants)."""
    return ([ELECTRA_15] if run.electra_15 else []) + \
        ([] if run.has_discriminator else [MASKED_LM]) + [run.generator]


@dataclasses.dataclass(frozen=True)
class State:
    name: str
    what: str  # what is wrong, in the run's terms
    causes: str  # the likely causes, as measured here
    remedy: str  # what to try: hparam names and values
    test: Callable[[Sequence[Mapping], RunFacts], bool]
    # {run kind: {"what" / "causes" / "remedy": text}} for runs the default words do not fit
    # (a remedy naming the generator's width and temperature, for a run with neither).
    variants: Mapping[str, Mapping[str, str]] = dataclasses.field(default_factory=dict)

    def advice(self, run: RunFacts | None = None) -> dict[str, str]:
        """what, causes and remedy for `run` (None: the default words)."""
        words = {"what": self.what, "causes": self.causes, "remedy": self.remedy}
        for kind in reversed(run_kinds(run) if run else []):  # the most specific wins
            words.update(self.variants.get(kind, {}))
        return words


OPTIMIZER_FIX = ("adam_bias_correction true and lr_decay_after_warmup true (or num_warmup_steps "
                 "in the thousands)")
STATES = (
    State("loss_not_finite", "a held-out loss is NaN or Inf",
          "a learning rate too high for the model, or float16 overflow",
          "learning_rate lower (e.g. half), compute_dtype bfloat16 or float32, clip_norm 1.0, "
          "a longer num_warmup_steps", _not_finite),
    State("disc_stalled",
          "the discriminator calls almost no token replaced and ranks replaced tokens little "
          "better than chance (AUC over real tokens below 0.70)",
          "measured here: the official optimizer (no bias correction) with 20 warm-up steps "
          "(from step 40); "
          "a small discriminator whose generator has caught up (1/4-width generator, "
          "temperature 1, a few hundred steps or more)",
          f"{OPTIMIZER_FIX}, temperature 2.0, a smaller generator_hidden_size (0.125)",
          _disc_stalled,
          {RANDOM: {"causes": "the discriminator does not tell even random replacements from "
                              "the text: an optimizer that stalls it (measured here with a "
                              "learned generator: the official optimizer with 20 warm-up steps), "
                              "or a model too small for its text (measured here: tiny models on "
                              "the tests' 32-word toy language, from step 40)",
                    "remedy": f"{OPTIMIZER_FIX}, a lower learning_rate (uniform and unigram "
                              "samples leave no generator setting to tune)"},
           FROZEN: {"remedy": f"{OPTIMIZER_FIX}, temperature 2.0 (the frozen generator keeps "
                              "the discriminator's width); init_checkpoint from "
                              "tools/two_stage_init.py, so the discriminator starts from the "
                              "generator's weights"}}),
    State("disc_all_replaced",
          "the discriminator calls almost every token replaced (under a tenth of the originals' "
          "share called original) and ranks replaced tokens little better than chance (AUC "
          "over real tokens below 0.70)",
          "a discriminator driven to one answer by the optimizer or the learning rate (as "
          "disc_stalled, the other way), or most tokens replaced (a high mask_prob); measured "
          "here only with electra_15",
          f"{OPTIMIZER_FIX}, a lower learning_rate, mask_prob 0.15",
          _disc_all_replaced,
          {ELECTRA_15: {"causes": "electra_15 trains the discriminator only at the masked "
                                  "positions, and while the generator is weak nearly all of "
                                  "them are replaced: it learns to answer 'replaced' (measured "
                                  "here: a toy run, every token called replaced at steps 20 "
                                  "and 40)",
                        "remedy": "electra_15 false (the discriminator then learns from every "
                                  "token: the paper's better objective)"}}),
    State("collapse",
          "the discriminator's last-layer vectors of held-out text are nearly parallel, or a "
          "hidden dimension barely varies: the encoder no longer tells tokens apart",
          "measured here: the official optimizer with 20 warm-up steps on a tiny model (a dead "
          "dimension from step 60; a faithful reference reached mean cosine 1.000 by step 160)",
          "adam_bias_correction true, lr_decay_after_warmup true, or num_warmup_steps 10000 as "
          "the official recipe; a lower learning_rate", _collapsed,
          {MASKED_LM: {"what": "the encoder's last-layer vectors of held-out text are nearly "
                               "parallel, or a hidden dimension barely varies: it no longer "
                               "tells tokens apart"}}),
    State("generator_too_strong",
          "under 5% of the tokens are replaced: the generator's samples equal the original at "
          "most masked positions, so the discriminator sees few replaced tokens",
          "a generator too large for the discriminator (the paper found 1/4-1/2 of its width "
          "best, and raised masking to 25% for ELECTRA-Large for this reason); text that "
          "repeats itself (measured here: text nearly all of one word, from step 40)",
          "mask_prob 0.25, generator_hidden_size 0.25-0.5, temperature 1.5-2.0",
          _generator_too_strong,
          {FROZEN: {"remedy": "mask_prob 0.25, temperature 1.5-2.0 (the frozen generator keeps "
                              "the discriminator's width)"}}),
    State("generator_idle",
          "the generator's held-out masked-LM loss is still near that of a uniform guess "
          "(above 0.9 ln(vocab_size)): it learns nothing, and the discriminator's task stays as "
          "easy as with random replacements",
          "gen_weight 0, a learning_rate too low for the generator, a frozen generator that "
          "was never trained (measured here: freeze_generator from scratch, at its first check)",
          "gen_weight 1.0, learning_rate as the recipe (1e-3 for tiny models); set "
          "uniform_generator true if random replacements are intended", _generator_idle,
          {FROZEN: {"causes": "a frozen generator that was never trained (measured here: "
                              "freeze_generator from scratch, at its first check)",
                    "remedy": "init_checkpoint from tools/two_stage_init.py on a trained "
                              "stage-1 masked LM (electra_objective false), or freeze_generator "
                              "false"},
           MASKED_LM: {"what": "the masked LM's held-out loss is still near that of a uniform "
                               "guess (above 0.9 ln(vocab_size)): the model learns nothing",
                       "causes": "gen_weight 0 (the masked-LM loss's weight) or a learning_rate "
                                 "too low",
                       "remedy": "gen_weight 1.0, learning_rate as the recipe (1e-3 for tiny "
                                 "models)"}}),
    State("loss_rising",
          f"the held-out masked-LM loss has stayed {RISE_MARGIN:.0%} above its lowest value for "
          f"{RISE_EVALS} evals",
          "a learning rate too high after warm-up, training that diverges slowly, or held-out "
          "text unlike the training text (measured here: eval_tfrecords of another text)",
          "learning_rate lower (e.g. half), clip_norm 1.0, lr_decay_after_warmup true; "
          "held-out data from the training corpus (eval_tfrecords unset)",
          _loss_rising),
)
# Checked after every block of steps, not at evals.
LR_ZERO = State(
    "lr_zero_early", "the learning rate is 0 before the last step: the weights no longer change",
    "a decay far steeper than linear (measured here: lr_decay_power 1000 reaches 0 in float32 "
    "ten steps after warm-up), or a learning_rate below float32's range",
    "lr_decay_power 1.0 (linear, the official recipe); a learning_rate of 1e-5 or more",
    lambda history, run: False)
BY_NAME = {state.name: state for state in STATES + (LR_ZERO,)}


# The states whose rules read only figures a training step computes anyway (its discriminator's
# predictions against its labels, its masked-LM loss): checked on the training batches too.
TRAIN_CHECKED = ("disc_stalled", "disc_all_replaced", "generator_too_strong", "generator_idle")
# Which check reads which states: a state stays active while any check that reads it finds it.
CHECKS = {"eval": tuple(state.name for state in STATES), "train": TRAIN_CHECKED,
          "lr": (LR_ZERO.name,)}


def training_window_start(run: RunFacts) -> int:
    """The first step whose training batches the TRAIN_CHECKED states are read from: before it
    a discriminator is still at its starting answer and chance ranking (DISC_GRACE_STEPS)."""
    return run.num_warmup_steps + DISC_GRACE_STEPS


def assess(history: Sequence[Mapping], run: RunFacts) -> list[str]:
    """Names of the eval-time states true at the newest eval of `history`."""
    return [state.name for state in STATES if history and state.test(history, run)]


def lr_at_zero(step: int, learning_rate: float, run: RunFacts) -> bool:
    return learning_rate <= 0.0 and step < run.num_train_steps


def token_geometry(vectors: np.ndarray) -> dict[str, float]:
    """Collapse measures of token vectors [N, H] (real tokens of held-out text):
    repr_mean_cosine: mean cosine over pairs of distinct tokens (1: all parallel);
    repr_min_dim_spread: the smallest dimension's standard deviation across tokens over the
    median dimension's (0: a dimension is the same for every token)."""
    x = np.asarray(vectors, np.float64)
    n = x.shape[0]
    units = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
    total = units.sum(0)
    mean_cosine = (total @ total - n) / max(n * (n - 1), 1)
    spread = x.std(0)
    median = float(np.median(spread))
    return {"repr_mean_cosine": float(mean_cosine),
            "repr_min_dim_spread": float(spread.min() / median) if median > 0 else 0.0}


def describe(state_name: str, step: int, run: RunFacts | None = None, where: str = "") -> str:
    """The state's warning, its advice fitted to `run` (None: the default words); `where`: what
    it was read off, e.g. " (training batches of steps 201-400)"."""
    words = BY_NAME[state_name].advice(run)
    return (f"health: {state_name} since step {step}{where}: {words['what']}. Likely causes: "
            f"{words['causes']}. Try: {words['remedy']}")


def line(active: Mapping[str, int]) -> str:
    """One line for the run's current health: "ok" or the states and the step each began."""
    if not active:
        return "ok"
    return ", ".join(f"{name} since step {step}" for name, step in sorted(
        active.items(), key=lambda item: (item[1], item[0])))


class Monitor:
    """Tracks the active states of one run; logs each change once.

    `history`: the evals already recorded (a resumed run's results history), each possibly with
    its `health` entry, so a state active before a restart is not announced again.
    """

    def __init__(self, run: RunFacts, history: Iterable[Mapping] = ()):
        self.run = run
        self.history = [dict(h) for h in history]
        self.active: dict[str, int] = dict(self.history[-1].get("health", {})) \
            if self.history else {}
        # The states each check (CHECKS) finds now. A state is active while any of them finds
        # it, so the held-out and the training batches' readings of one state do not toggle it.
        # A resumed run's states are the recorded evals' (an eval's `health` holds all found).
        self._found = {check: set() for check in CHECKS}
        for name in self.active:
            check = next((c for c, names in CHECKS.items() if name in names), None)
            if check is not None:
                self._found[check].add(name)

    def _update(self, check: str, names: Iterable[str], step: int, where: str = "") -> None:
        self._found[check] = set(names) & set(CHECKS[check])
        found = set().union(*self._found.values())
        for name in sorted(found - set(self.active)):
            self.active[name] = step
            log.warning("%s", describe(name, step, self.run, where))
        for name in sorted((set(self.active) - found) & set(CHECKS[check])):
            log.info("health: %s cleared at step %d (began at step %d)", name, step,
                     self.active.pop(name))

    def after_eval(self, step: int, metrics: Mapping) -> dict[str, int]:
        """Checks the eval of `step`; returns the `health` entry: {state: step it began}."""
        entry = dict(metrics, global_step=step)
        self.history = [h for h in self.history if h["global_step"] < step] + [entry]
        self._update("eval", assess(self.history, self.run), step)
        return dict(self.active)

    def after_training_batches(self, first_step: int, step: int, figures: Mapping) -> bool:
        """The training batches' check of steps first_step + 1 .. step: `figures` as an eval's
        metrics (disc_auc_real, disc_positive_rate, disc_replaced_rate, masked_lm_loss), pooled
        over those steps. True when a state began or cleared."""
        before = dict(self.active)
        entry = dict(figures, global_step=step)
        names = [state.name for state in STATES
                 if state.name in TRAIN_CHECKED and state.test([entry], self.run)]
        self._update("train", names, step,
                     f" (read off the training batches of steps {first_step + 1}-{step})")
        return before != self.active

    def after_steps(self, step: int, learning_rate: float) -> bool:
        """The between-evals check; True when a state began or cleared. A rate of 0 at the
        schedule's end neither begins the state nor clears it: a run whose rate reached 0
        early still reports it at its final eval."""
        before = dict(self.active)
        if lr_at_zero(step, learning_rate, self.run):
            self._update("lr", [LR_ZERO.name], step)
        elif learning_rate > 0.0:
            self._update("lr", [], step)
        return before != self.active
