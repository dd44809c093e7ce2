"""One page on a pre-training run, readable on a headless server: its curves and its health.

    python tools/inspect_run.py DATA/models/NAME
    python tools/inspect_run.py DATA/models/NAME --png curves.png   # also a picture
    python tools/inspect_run.py DATA/models/NAME --rows 30

Prints the held-out evals (losses, discriminator AUC, precision and recall, masked-LM accuracies,
token-vector geometry, probes), the training curve (loss, its two parts, learning rate, gradient
norm) at up to --rows steps, and the health states (pretrain/health.py) with the step each began
and, when it did, cleared. With matplotlib installed (it is not a requirement) it also draws the
same curves to a PNG (default: <model dir>/results/run_curves.png). Reads only what the run
writes as it goes (results/unsup_results_history.json, the TensorBoard events), so it works on
a run in progress. Exit 2 when the directory holds no run.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from util import console  # noqa: E402,F401 -- first: TensorFlow's start-up lines stay off

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
                 ("lr", "train/learning_rate"), ("grad_norm", "train/global_norm"))


def read_evals(model_dir: str) -> list[dict]:
    path = os.path.join(model_dir, HISTORY)
    return io_utils.read_json(path) if fs.exists(path) else []


def read_train_curves(model_dir: str) -> dict[str, list[tuple[int, float]]]:
    """train/ scalars of the TensorBoard events (a file being written is read up to its end)."""
    if not any(n.startswith("events.out.tfevents") for n in fs.listdir(model_dir)):
        return {}
    from util import training_utils  # TensorFlow: only when there are events to read
    scalars = training_utils.read_scalars(model_dir)
    return {tag: sorted(dict(points).items()) for tag, points in scalars.items()
            if tag.startswith("train/")}


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
    if value is None:
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
    config = io_utils.read_json(config_path) if fs.exists(config_path) else {}
    total = config.get("num_train_steps")
    steps = [s for points in curves.values() for s, _ in points] + \
        [e["global_step"] for e in evals]
    step = max(steps, default=0)
    lines = [f"run {model_dir}: step {step}" + (f" of {total}" if total else "")
             + (f", warm-up {config['num_warmup_steps']} steps" if "num_warmup_steps" in config
                else "")]
    latest = evals[-1].get("health", {}) if evals else {}
    lines.append(f"health at the newest eval: {health.line(latest)}" if evals
                 else "health: no eval yet (set eval_every_steps to check during training)")
    facts = health.RunFacts.from_settings(config) if config else None  # advice fits the run
    for name, began, cleared in health_spans(evals):
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model_dir", help="a pre-training model dir. Example: data/models/demo")
    parser.add_argument("--png", help="where to draw the curves (matplotlib needed; default "
                                      "<model dir>/results/run_curves.png)")
    parser.add_argument("--rows", type=int, default=12,
                        help="at most this many rows per table (default 12)")
    args = parser.parse_args(argv)
    if not fs.isdir(args.model_dir):
        print(f"inspect_run: {args.model_dir} is not a directory", file=sys.stderr)
        return 2
    evals = read_evals(args.model_dir)
    curves = read_train_curves(args.model_dir)
    if not evals and not curves:
        print(f"inspect_run: {args.model_dir} holds no evals ({HISTORY}) and no TensorBoard "
              "events: is it a pre-training model dir?", file=sys.stderr)
        return 2
    print("\n".join(summary(args.model_dir, evals, curves, max(args.rows, 2))))
    png = args.png or os.path.join(args.model_dir, "results", "run_curves.png")
    if draw(png, evals, curves):
        print(f"\ncurves drawn to {png}")
    else:
        print("\n(no picture: matplotlib is not installed)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
