"""Scorer: accumulates one task's per-example model outputs on the host and turns them into metrics.

Metric code stays out of the model: the evaluation loop runs the network, drops padding rows and
hands each remaining example's outputs (a dict of numpy values, see the task's head) to
`update`. `get_results()` then returns (name, value) pairs, e.g. [("accuracy", 91.2),
("loss", 0.31)]; percentages are on a 0-100 scale as in the official release.
"""
import abc
from typing import Any, Mapping


class Scorer(abc.ABC):
    """Base class: subclasses implement `update` (call super) and `_get_results`."""

    def __init__(self):
        self._updated = False
        self._cached_results: list[tuple[str, float]] = []
        self._total_loss = 0.0
        self._count = 0

    @abc.abstractmethod
    def update(self, results: Mapping[str, Any]) -> None:
        """Adds one example's outputs (always has "loss")."""
        self._updated = True
        self._count += 1
        self._total_loss += float(results.get("loss", 0.0))

    def get_loss(self) -> float:
        return self._total_loss / max(self._count, 1)

    @property
    def num_examples(self) -> int:
        return self._count

    @abc.abstractmethod
    def _get_results(self) -> list[tuple[str, float]]:
        """Metric (name, value) pairs computed from everything seen so far."""

    def get_results(self, prefix: str = "") -> list[tuple[str, float]]:
        if self._updated:
            self._cached_results = self._get_results()
            self._updated = False
        return [(prefix + k, v) for k, v in self._cached_results]

    def collapse(self) -> str | None:
        """Why the predictions seen so far carry no information about the input (every example
        one class, ...; finetune/health.py), or None. Scorers that can tell override it."""
        return None

    def results_str(self) -> str:
        return " - ".join(f"{k}: {v:.2f}" for k, v in self.get_results())
