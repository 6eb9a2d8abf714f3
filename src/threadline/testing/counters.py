"""Counters a test reads afterwards, whichever tool drives the code under test.

:class:`Effects` is a log agents under test write their outside-world effects to (it survives
eviction, like the world does); :class:`SettlementLog` counts every settle transition that
reported success, per submission.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from threadline.threads import transitions


@dataclass
class Effects:
    """A log of what agents did to the outside world; it survives eviction like the world does.

    Agents under test call :meth:`hit` inside their steps; a test then counts how often each
    effect really happened, including runs lost to a crash.
    """

    calls: dict[str, int] = field(default_factory=dict)

    def hit(self, name: str) -> int:
        """Record one occurrence of ``name``; return how many there have been."""
        self.calls[name] = self.calls.get(name, 0) + 1
        return self.calls[name]

    def count(self, name: str) -> int:
        """How often ``name`` happened."""
        return self.calls.get(name, 0)



class SettlementLog:
    """Counts every settle transition that reported success, per submission.

    Counting settlement records in the log shows a second settlement only once it got as far
    as writing its record.
    This log wraps the transition itself: a second settlement of one submission that reported
    success shows here as 2.
    """

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def install(self, monkeypatch: Any) -> SettlementLog:
        """Wrap ``transitions.settle`` for the rest of the test (pytest's ``monkeypatch``
        fixture undoes it)."""
        real = transitions.settle

        def counting(storage: Any, submission_id: str, **kwargs: Any) -> bool:
            settled = real(storage, submission_id, **kwargs)
            if settled:
                self.counts[submission_id] = self.counts.get(submission_id, 0) + 1
            return settled

        monkeypatch.setattr(transitions, "settle", counting)
        return self

    def count(self, submission_id: str) -> int:
        """How many times the submission was settled since :meth:`install`."""
        return self.counts.get(submission_id, 0)


__all__ = ["Effects", "SettlementLog"]
