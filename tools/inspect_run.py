"""One page on a pre-training run, readable on a headless server: its curves and its health.

    python tools/inspect_run.py DATA/models/NAME
    python tools/inspect_run.py DATA/models/NAME --png curves.png   # also a picture
    python tools/inspect_run.py DATA/models/NAME --rows 30

Prints the held-out evals (losses, discriminator AUC, precision and recall, masked-LM accuracies,
token-vector geometry, probes), the training curve (loss, its two parts, learning rate, gradient
norm, and at each health check the training batches' discriminator figures) at up to --rows
steps, and the health states (pretrain/health.py) with the step each began and, when it did,
cleared: found at held-out evals or by the training batches' checks every run makes
(health_every_steps). A run halted during an eval is said to be, with what its re-run does. With matplotlib installed (it is not a requirement) it also draws the
same curves to a PNG (default: <model dir>/results/run_curves.png). Reads only what the run
writes as it goes (results/unsup_results_history.json, the TensorBoard events), so it works on
a run in progress.

On a fine-tuning trial dir (`<model_dir>_<trial>`, holding finetune_config.json) it reports that
trial instead: its step, its dev results and whether its predictions collapsed
(finetune/health.py), as run_finetuning.py recorded them in eval_results.json.

Every bad input (a missing dir, a dir that holds no run, a results file that is empty, not JSON
or not what the run writes) is one line on standard error and exit status 2.
"""
import argparse
import logging
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from util import console  # noqa: E402 -- first: TensorFlow's start-up lines stay off

from pretrain import health  # noqa: E402  (numpy only: no TensorFlow start-up for the evals)
from util import fs, io_utils  # noqa: E402

HISTORY = os.path.join("results", "unsup_results_history.json")
EVAL_COLUMNS = (("loss", "loss"), ("mlm_loss", "masked_lm_loss"), ("mlm_acc", "masked_lm_accuracy"),
                ("sampled", "sampled_masked_lm_accuracy"), ("disc_loss", "disc_loss"),
                ("auc", "disc_auc"), ("auc_real", "disc_auc_real"),
                ("precision", "disc_precision"), ("recall", "disc_recall"),
                ("called", "disc_positive_rate"), ("replaced", "disc_replaced_rate"),
                ("cosine", "repr_mean_cosine"), ("min_spread", "repr_min_dim_spread"))
TRAIN_COLUMNS = (("loss", "train/loss"), ("mlm_loss", "train/mlm_loss"),
                 ("disc_loss", "train/disc_loss"), ("mlm_acc", "train/masked_lm_accuracy"),
                 ("lr", "train/learning_rate"), ("grad_norm", "train/global_norm"),
                 # at the training batches' health checks (pretrain/training_health.py)
                 ("auc_real", "train/disc_auc_real"), ("called", "train/disc_positive_rate"),
                 ("replaced", "train/disc_replaced_rate"))


FINETUNE_CONFIG = "finetune_config.json"  # model/model_dir.py FINETUNE_CONFIG_FILE
TRIAL_RESULTS = "eval_results.json"  # finetune/trainer.py RESULTS_FILE


def read_json(path: str, kind: type, what: str):
    """A results file the run wrote, as `kind`; ValueError naming the file when it is empty,
    not JSON, or not a JSON `what`."""
    if fs.getsize(path) == 0:
        raise ValueError(f"{path} is empty: a run killed while writing it, or not a run's file")
    value = io_utils.read_json(path)  # a syntax error names file:line:col
    if not isinstance(value, kind):
        raise ValueError(f"{path} holds a JSON {type(value).__name__}, not {what}")
    return value


def read_evals(model_dir: str) -> list[dict]:
    path = os.path.join(model_dir, HISTORY)
    if not fs.exists(path):
        return []
    evals = read_json(path, list, "the list of evals a pre-training run writes")
    for i, entry in enumerate(evals):
        if not (isinstance(entry, dict) and isinstance(entry.get("global_step"), int)
                and isinstance(entry.get("health", {}), dict)):
            raise ValueError(f"{path}: eval {i} is not an eval record (an object with an "
                             "integer global_step and a health object)")
    return evals


def read_train_curves(model_dir: str) -> dict[str, list[tuple[int, float]]]:
    """train/ and health/ scalars of the TensorBoard events (a file being written is read up to
    its end); health/<state> is 1 while the state is active, written at every check."""
    if not any(n.startswith("events.out.tfevents") for n in fs.listdir(model_dir)):
        return {}
    from util import training_utils  # TensorFlow: only when there are events to read
    scalars = training_utils.read_scalars(model_dir)
    return {tag: sorted(dict(points).items()) for tag, points in scalars.items()
            if tag.startswith(("train/", "health/"))}


def checked_health(curves: dict) -> tuple[int | None, list[tuple[str, int, int | None]]]:
    """(the newest check's step, the states' spans) from the health/ scalars: every check of
    the run, held-out evals and the training batches' (pretrain/training_health.py)."""
    tags = {tag[len("health/"):]: points for tag, points in curves.items()
            if tag.startswith("health/")}
    spans = []
    for name, points in tags.items():
        began = None
        for step, value in points:
            if value > 0.5 and began is None:
                began = step
            elif value <= 0.5 and began is not None:
                spans.append((name, began, step))
                began = None
        if began is not None:
            spans.append((name, began, None))
    newest = max((p[-1][0] for p in tags.values() if p), default=None)
    return newest, sorted(spans, key=lambda s: (s[1], s[0]))


def owed_eval(model_dir: str, config: dict, evals: list[dict]) -> int | None:
    """The step whose eval a halted run still owes: its newest checkpoint is at an eval step
    (eval_every_steps, or the end with do_eval) that the history lacks, so the run stopped
    during that eval or just before it. The re-run evaluates it first (pretrain/loop.py)."""
    step = _newest_checkpoint_step(model_dir)
    every, total = config.get("eval_every_steps") or 0, config.get("num_train_steps")
    if not step or any(e["global_step"] == step for e in evals):
        return None
    periodic = every > 0 and step % every == 0 and (total is None or step < total)
    final = bool(config.get("do_eval")) and total is not None and step >= total
    return step if periodic or final else None


def health_spans(evals: list[dict]) -> list[tuple[str, int, int | None]]:
    """(state, step it began, step it cleared or None) from the evals' `health` entries."""
    spans, open_states = [], {}
    for entry in evals:
        current = entry.get("health", {})
        for name, began in current.items():
            open_states.setdefault(name, began)
        for name in [n for n in open_states if n not in current]:
            spans.append((name, open_states.pop(name), entry["global_step"]))
    spans += [(name, began, None) for name, began in open_states.items()]
    return sorted(spans, key=lambda s: (s[1], s[0]))


def _cell(value) -> str:
    if not isinstance(value, (int, float)):  # absent, or not a number the run wrote
        return "-"
    if abs(value) >= 1000 or (0 < abs(value) < 1e-3):
        return f"{value:.2e}"
    return f"{value:.4f}" if abs(value) < 10 else f"{value:.2f}"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    fmt = lambda cells: "  ".join(c.rjust(w) for c, w in zip(cells, widths))  # noqa: E731
    return [fmt(header)] + [fmt(r) for r in rows]


def _sampled(points: list, limit: int) -> list:
    if len(points) <= limit:
        return points
    picks = {round(i * (len(points) - 1) / (limit - 1)) for i in range(limit)}
    return [p for i, p in enumerate(points) if i in picks]


def summary(model_dir: str, evals: list[dict], curves: dict, rows: int) -> list[str]:
    config_path = os.path.join(model_dir, "pretrain_config.json")
    config = read_json(config_path, dict, "a pre-training config") if fs.exists(config_path) \
        else {}
    total = config.get("num_train_steps")
    steps = [s for points in curves.values() for s, _ in points] + \
        [e["global_step"] for e in evals]
    step = max(steps, default=0)
    lines = [f"run {model_dir}: step {step}" + (f" of {total}" if total else "")
             + (f", warm-up {config['num_warmup_steps']} steps" if "num_warmup_steps" in config
                else "")]
    lines += _health_lines(model_dir, config, evals, curves)
    newest_check, spans = checked_health(curves)
    facts = health.RunFacts.from_settings(config) if config else None  # advice fits the run
    for name, began, cleared in spans if newest_check is not None else health_spans(evals):
        state = health.BY_NAME.get(name)
        words = state.advice(facts) if state else {}
        lines.append(f"  {name}: began at step {began}"
                     + (f", cleared at step {cleared}" if cleared is not None else ", active")
                     + (f"\n    {words['what']}\n    try: {words['remedy']}"
                        if state and cleared is None else ""))
    if evals:
        probe_keys = sorted({k for e in evals for k in e if k.startswith("probe/")})
        columns = [c for c in EVAL_COLUMNS if any(c[1] in e for e in evals)]
        header = ["step"] + [c[0] for c in columns] + [k[len("probe/"):] for k in probe_keys]
        table = [[str(e["global_step"])] + [_cell(e.get(k)) for _, k in columns]
                 + [_cell(e.get(k)) for k in probe_keys] for e in _sampled(evals, rows)]
        lines += ["", f"held-out evals ({len(evals)}):"] + _table(header, table)
    train = [c for c in TRAIN_COLUMNS if c[1] in curves]
    if train:
        by_step: dict[int, dict] = {}
        for _, tag in train:
            for s, v in curves[tag]:
                by_step.setdefault(s, {})[tag] = v
        points = _sampled(sorted(by_step.items()), rows)
        table = [[str(s)] + [_cell(values.get(tag)) for _, tag in train] for s, values in points]
        lines += ["", f"training (block means, {len(by_step)} points):"] + \
            _table(["step"] + [c[0] for c in train], table)
    return lines


def _health_lines(model_dir: str, config: dict, evals: list[dict], curves: dict) -> list[str]:
    """The run's health now: at the newest eval, at the training batches' newest check when
    later, or when nothing was checked yet, why; and an eval a halted run still owes."""
    lines = []
    if evals:
        lines.append(f"health at the newest eval: {health.line(evals[-1].get('health', {}))}")
    newest_check, spans = checked_health(curves)
    if newest_check is not None and (not evals or newest_check > evals[-1]["global_step"]):
        active = {name: began for name, began, cleared in spans if cleared is None}
        lines.append(f"health at step {newest_check} (the training batches' check): "
                     f"{health.line(active)}")
    owed = owed_eval(model_dir, config, evals)
    if owed is not None:
        then = "then ends" if owed >= config.get("num_train_steps", owed + 1) else \
            "then continues training"
        lines.append(f"eval at step {owed}: not recorded: the run stopped during it (or between "
                     f"its checkpoint and it); re-running the same command evaluates step "
                     f"{owed} first, {then}")
    elif not evals and newest_check is None:
        every = config.get("health_every_steps", 0)  # absent: a run older than the checks
        start = config.get("num_warmup_steps", 0) + health.DISC_GRACE_STEPS
        lines.append(f"health: not checked yet (the training batches are checked every {every} "
                     f"steps from step {start} on)" if every else
                     "health: not checked (health_every_steps 0 and no evals: set either to "
                     "check during training)")
    return lines


def draw(path: str, evals: list[dict], curves: dict) -> bool:
    """The curves as a PNG; False when matplotlib is not installed."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    panels = [("training loss", ["train/loss", "train/mlm_loss", "train/disc_loss"], curves),
              ("learning rate", ["train/learning_rate"], curves),
              ("gradient norm", ["train/global_norm"], curves),
              ("held-out masked LM", ["masked_lm_accuracy", "sampled_masked_lm_accuracy"], None),
              ("discriminator", ["disc_auc", "disc_auc_real", "disc_precision", "disc_recall"],
               None),
              ("token vectors", ["repr_mean_cosine", "repr_min_dim_spread"], None)]
    last_step = max([e["global_step"] for e in evals] + [s for points in curves.values()
                                                         for s, _ in points])
    probe_keys = sorted({k for e in evals for k in e if k.startswith("probe/")})
    if probe_keys:
        panels.append(("probes", probe_keys, None))
    fig, axes = plt.subplots((len(panels) + 2) // 3, 3, figsize=(15, 4 * ((len(panels) + 2) // 3)),
                             squeeze=False)
    for ax, (title, keys, source) in zip(axes.flat, panels):
        for key in keys:
            points = source.get(key, []) if source is not None else \
                [(e["global_step"], e[key]) for e in evals if key in e]
            if points:
                ax.plot(*zip(*points), label=key.split("/")[-1])
        for name, began, cleared in health_spans(evals):  # shaded while a state is active
            ax.axvspan(began, cleared if cleared is not None else last_step, alpha=0.1,
                       color="red")
        ax.set_title(title)
        ax.set_xlabel("step")
        if ax.lines:
            ax.legend(fontsize=8)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    fig.tight_layout()
    with io_utils.atomic_open(path, "wb", encoding=None) as f:  # never a half picture
        fig.savefig(f, dpi=80, format="png")
    plt.close(fig)
    return True


def _newest_checkpoint_step(trial_dir: str) -> int | None:
    steps = [int(name[len("model.ckpt-"):-len(".index")]) for name in fs.listdir(trial_dir)
             if name.startswith("model.ckpt-") and name.endswith(".index")
             and name[len("model.ckpt-"):-len(".index")].isdigit()]
    return max(steps, default=None)


def _halted_trial_line(trial_dir: str, settings: dict) -> str:
    """A trial without an eval record: halted during its training, or with its training done
    during (or just before) its evaluation; what re-running its command does."""
    step = _newest_checkpoint_step(trial_dir)
    total = settings.get("train_steps")
    at = "no checkpoint yet" if step is None else f"checkpoint at step {step}" + (
        f" of {total}" if isinstance(total, int) else "")
    if step is not None and isinstance(total, int) and step >= total:
        why = ("its training finished; halted during its evaluation (or run without do_eval). "
               "Re-run its run_finetuning.py command to evaluate it (the training is not "
               "repeated)")
    else:
        why = ("halted before its eval, or run without do_eval. Re-run its run_finetuning.py "
               "command to finish and evaluate it")
    return f"fine-tuning trial {trial_dir}: {at}; no eval record ({TRIAL_RESULTS}): {why}"


def trial_summary(trial_dir: str) -> list[str]:
    """A fine-tuning trial: its step, its dev results and whether they collapsed."""
    settings = read_json(os.path.join(trial_dir, FINETUNE_CONFIG), dict, "a trial's settings")
    results_path = os.path.join(trial_dir, TRIAL_RESULTS)
    if not fs.exists(results_path):
        return [_halted_trial_line(trial_dir, settings)]
    record = read_json(results_path, dict, "a trial's eval record")
    results, collapsed = record.get("results"), record.get("collapsed", {})
    if not (isinstance(results, dict) and isinstance(collapsed, dict)
            and isinstance(record.get("global_step"), int)):
        raise ValueError(f"{results_path} is not a trial's eval record (an object with "
                         "global_step, results and collapsed)")
    total = record.get("train_steps")
    lines = [f"fine-tuning trial {record.get('trial', '?')} {trial_dir}: step "
             f"{record['global_step']}" + (f" of {total}" if isinstance(total, int) else "")
             + (", finished" if isinstance(total, int) and record["global_step"] >= total
                else "")]
    for name, metrics in sorted(results.items()):
        shown = ", ".join(f"{k} = {_cell(v)}" for k, v in sorted(metrics.items())
                          if isinstance(v, (int, float))) if isinstance(metrics, dict) else ""
        lines.append(f"  {name}: {shown or '-'}")
    if record.get("diverged"):
        return lines + [f"diverged: {record['diverged']}",
                        "  no dev results; the run's median leaves it out. Re-running the same "
                        "command does not train it again (it would diverge the same way): try "
                        "a lower learning_rate or clip_norm 1.0, with another model_dir"]
    if collapsed:
        lines.append("collapsed: its dev predictions carry no information about the input "
                     "(they score like the trivial baseline)")
        lines += [f"  {name}: {why}" for name, why in sorted(collapsed.items())]
        lines.append("  the run's median counts it; more trials (num_trials) tell a bad seed "
                     "from a bad setup")
    else:
        lines.append("collapsed: no (the dev predictions vary with the input)")
    return lines


def inspect(args) -> None:
    """Prints the page for args.model_dir; ValueError or OSError on a dir that holds no run or
    a results file that is not what a run writes."""
    if not fs.isdir(args.model_dir):
        raise ValueError(f"{args.model_dir} " + (
            "is a file, not a model dir" if fs.exists(args.model_dir) else "does not exist"))
    if fs.exists(os.path.join(args.model_dir, FINETUNE_CONFIG)):
        print("\n".join(trial_summary(args.model_dir)))
        return
    evals = read_evals(args.model_dir)
    curves = read_train_curves(args.model_dir)
    if not evals and not curves:
        raise ValueError(f"{args.model_dir} holds no evals ({HISTORY}) and no TensorBoard "
                         "events: is it a pre-training model dir or a fine-tuning trial dir?")
    print("\n".join(summary(args.model_dir, evals, curves, max(args.rows, 2))))
    png = args.png or os.path.join(args.model_dir, "results", "run_curves.png")
    if draw(png, evals, curves):
        print(f"\ncurves drawn to {png}")
    else:
        print("\n(no picture: matplotlib is not installed)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model_dir", help="a pre-training model dir or a fine-tuning trial dir. "
                                          "Example: data/models/demo")
    parser.add_argument("--png", help="where to draw the curves (matplotlib needed; default "
                                      "<model dir>/results/run_curves.png)")
    parser.add_argument("--rows", type=int, default=12,
                        help="at most this many rows per table (default 12)")
    console.add_verbose_flag(parser)
    args = parser.parse_args(argv)
    console.setup(args.verbose, logging.WARNING, "%(levelname)s %(message)s")
    try:
        inspect(args)
    except (ValueError, OSError) as e:  # OSError: an unreadable file, an unwritable --png
        print(f"inspect_run: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
