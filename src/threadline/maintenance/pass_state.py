"""What one maintenance pass records while it runs, and the names of its failpoints.

:class:`_Observed` is what the pass observed at its begin (the failure path re-arms from it),
and :class:`_Tally` what it counted and touched on the way; both live for one pass only. The
failpoint names mark where a pass announces itself to :mod:`threadline.scheduling.failpoints`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from threadline.scheduling import NativeRetry

BEGIN_BEFORE = "maintenance:begin:before"
BEGIN_AFTER = "maintenance:begin:after"
SELECT_BEFORE = "maintenance:select:before"
SELECT_AFTER = "maintenance:select:after"
BINDING_BEFORE = "maintenance:binding-retry:before"
BINDING_AFTER = "maintenance:binding-retry:after"
RECOVERY_STATUS_BEFORE = "maintenance:recovery-status:before"
RECOVERY_STATUS_AFTER = "maintenance:recovery-status:after"
RETRY_BEFORE = "maintenance:retry:before"
RETRY_AFTER = "maintenance:retry:after"
CHECKPOINT_BEFORE = "maintenance:checkpoint:before"
CHECKPOINT_AFTER = "maintenance:checkpoint:after"
FINISH_BEFORE = "maintenance:finish:before"
FINISH_AFTER = "maintenance:finish:after"


@dataclass
class _Observed:
    """What the pass observed at its begin; the failure path re-arms from it."""

    generation: int | None = None
    actionable: bool = False
    active_at_start: int = 0
    nonterminal: int = 0
    last_served: str | None = None
    last_recovered: str | None = None
    #: The earliest lane due at the begin (None: no lane due at all).
    earliest: int | None = None
    #: The native lane's crash-fallback deadline set at the begin of an actionable pass.
    fallback: int | None = None
    #: The native retry the generation record held at the begin (None: none); only it may end
    #: with the pass's success.
    retry_found: NativeRetry | None = None
    #: Whether that retry no longer deferred owed native work at the begin (a success ends it).
    retry_stale: bool = False
    #: The gate's revision when the pass last knew the producers' commits (a failure that a
    #: producer raced backs nothing off).
    revision: int = 0

    @property
    def retry_recorded(self) -> bool:
        """Whether the generation record held a native retry at the begin."""
        return self.retry_found is not None


@dataclass
class _Tally:
    recovered: int = 0
    repaired: bool = False
    settled: int = 0
    dispatched: int = 0
    nonterminal: int = 0
    cut_short: bool = False
    parked_lanes: bool = False
    waves: set[str] = field(default_factory=set)
    #: Threads whose fault transition storage refused in this pass (tried once per pass).
    unrecorded: set[str] = field(default_factory=set)
