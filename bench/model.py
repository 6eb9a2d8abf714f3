"""What a benchmark run produces: measurements of one case, several runs each."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

#: The systems compared, as the table and ``results.json`` name them.
SIM = "threadline (sqlite3 approximation)"
WORKERD = "threadline (workerd)"
AGENTS = "agents sdk (workerd)"

#: Scenario 8's cases: the alarm that runs a fire submitting nothing, one submitting once, and
#: the alarm after it, which runs that submission.
FIRE_NOTHING = "fire, nothing submitted"
FIRE_SUBMIT = "fire submitting one"
FIRE_RUN = "that submission's run"


def fire_case(schedules: int, what: str) -> str:
    """Scenario 8's case name for ``schedules`` schedules declared."""
    return f"N={schedules:,}: {what}"


class ScenarioError(RuntimeError):
    """A scenario did not do what it measures (a submission did not settle, say)."""


@dataclass
class Measurement:
    """One case of one scenario on one system: the figures of each run."""

    scenario: str
    system: str
    case: str
    runs: list[dict[str, float]] = field(default_factory=list)
    #: Per-statement rows of one run (``--explain``), when recorded.
    explain: list[dict[str, Any]] | None = None
    #: The summary as a results file holds it (set by :meth:`from_dict`, runs then unknown).
    figures: dict[str, dict[str, float]] | None = None

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Measurement:
        """A measurement read back from ``results.json`` (its summary, not its runs)."""
        return cls(data["scenario"], data["system"], data["case"],
                   explain=data.get("explain"), figures=data["figures"])

    def summary(self) -> dict[str, dict[str, float]]:
        """Median, min and max of every metric over the runs."""
        if self.figures is not None:
            return self.figures
        keys: list[str] = []
        for run in self.runs:
            keys += [k for k in run if k not in keys]
        out: dict[str, dict[str, float]] = {}
        for key in keys:
            values = [run[key] for run in self.runs if key in run]
            out[key] = {
                "median": statistics.median(values),
                "min": min(values),
                "max": max(values),
            }
        return out

    def median(self, metric: str) -> float | None:
        """The median of ``metric``, or None when it was not measured."""
        figure = self.summary().get(metric)
        return None if figure is None else figure["median"]

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "scenario": self.scenario,
            "system": self.system,
            "case": self.case,
            "runs": len(self.runs),
            "figures": self.summary(),
        }
        if self.explain is not None:
            out["explain"] = self.explain
        return out
