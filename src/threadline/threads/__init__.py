"""Threads and submissions: the ledger, the agent runtime and its recovery (DESIGN §5).

The maintenance pass drives this package through :class:`ThreadRuntime`:
``runtime.ledger.live_threads()`` and ``runtime.ledger.thread_open(thread)`` (live and open
work, read through partial indexes),
``runtime.run_recovery(thread)`` and ``runtime.process_thread_head(thread, yield_after=...)``.
Every write goes through the scheduling package's mutation gate.
"""

from threadline.threads.agents import AgentBinding, AgentRegistry, binding_registry_key
from threadline.threads.followups import Followup
from threadline.threads.ledger import AbortIntent, Ledger
from threadline.threads.model import (
    Admission,
    ApprovalDecision,
    Outcome,
    Resolution,
    ScheduledSubmission,
    Settlement,
    StepEffect,
    Submission,
    SubmissionState,
    WorkItem,
)
from threadline.threads.recovery import (
    Disposition,
    RecoveryBlocked,
    RecoveryDecision,
    RecoveryReport,
    RecoverySweepResult,
)
from threadline.threads.runtime import ThreadRuntime
from threadline.threads.turn import RetryPolicy, Turn

__all__ = [
    "AbortIntent",
    "Admission",
    "AgentBinding",
    "AgentRegistry",
    "ApprovalDecision",
    "Disposition",
    "Followup",
    "Ledger",
    "Outcome",
    "RecoveryBlocked",
    "RecoveryDecision",
    "RecoveryReport",
    "RecoverySweepResult",
    "Resolution",
    "RetryPolicy",
    "ScheduledSubmission",
    "Settlement",
    "StepEffect",
    "Submission",
    "SubmissionState",
    "ThreadRuntime",
    "Turn",
    "WorkItem",
    "binding_registry_key",
]
