"""The public import paths users' code relies on: each package's ``__all__``, pinned.

A layout change may move a module anywhere, but these names stay importable from these paths.
``threadline.worker`` imports the platform, so it is read with :mod:`ast`, not imported.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "threadline"

PUBLIC: dict[str, list[str]] = {
    "threadline": [
        "AccessRequest", "AgentError", "AnswerTooLarge", "ApiError", "Application",
        "ApprovalDecision",
        "BindingUnavailable", "Capability", "Clock", "Conflict", "CronSchedule",
        "DeliveryContext", "DeliveryRefused", "Environment", "ErrorCode", "EverySchedule",
        "Evicted", "Fault",
        "Followup", "Forbidden", "HttpAnswer", "HttpClientError", "HttpError",
        "HttpServerError", "HttpStatusError", "HttpStream", "HttpTimeout",
        "HttpTransportError", "IdSource", "InvalidSchedule", "LaneContext", "LanePhase",
        "ManualClock", "NonRetryable", "NotFound", "PassReport", "PayloadTooLarge", "Principal",
        "RandomIds", "Rate", "Record", "RecoveryEvent", "RetryAfter", "RetryPolicy",
        "RetryableAgentError",
        "RuntimeConfig", "ScheduleContext", "SchedulingError", "SchemaError", "SequentialIds",
        "SignatureInvalid", "Space", "SqliteStorage", "Storage", "StorageError",
        "SubscriberSpec", "SystemClock", "ThreadlineError", "Turn", "Unauthorized",
        "ValidationFailed", "access", "verify_signature",
    ],
    "threadline.testing": [
        "DEFAULT_MAX_PASSES", "AlarmInvariantError", "Crash", "Delivery", "DeliveryFailure",
        "Effects", "FakeAnswer", "FakeFetch", "FakeProvider", "HungTarget", "QuiescenceError",
        "Refusal", "SettlementLog",
        "SimulatedDeployment", "SimulatedObject",
        "StatementFailure", "ThreadHarness", "alarm_invariant_problem", "is_eviction",
    ],
    "threadline.pydantic_ai": [
        "DECLINED", "DEFAULT_HISTORY_RUNS", "MESSAGES_KIND", "STEP_CONFIG_KEY",
        "ThreadlineDurability", "TurnTransport", "approval_key", "earlier_messages",
        "openai_client", "openai_model", "run_durably", "step_name",
    ],
    "threadline.client": [
        "AsyncClient", "Client", "StreamedText", "ThreadEvent", "WaitTimeout",
        "raise_for_problem",
    ],
    "threadline.access": [
        "ALL_CAPABILITIES", "DEFAULT_SKEW", "INTERNAL_HEADER_PREFIX", "MAX_LINEAGE",
        "MAX_TOKEN_LENGTH", "MAX_TTL", "MIN_SECRET_LENGTH", "OPERATOR", "SIGNING_KEYS_SECRET",
        "STREAM_KEY_HEADER", "SUBJECT_HEADER", "TOKEN_IDS_HEADER", "TOKEN_ISSUED_HEADER",
        "TOKEN_VERSION", "AccessRequest", "Authorizer",
        "Capability", "Principal", "SigningKeys", "TokenLineage", "TokenRejected", "Verified",
        "looks_like_token", "mint", "verify",
    ],
}

WORKER = ["TOKEN_SECRET", "BindingRouter", "DeliveryEnv", "ThreadObjectBase", "WorkerBase",
          "WorkersFetch"]


def isort_order(names: list[str]) -> list[str]:
    """The order ``__all__`` is kept in: constants, then classes, then the rest, each A-Z."""
    def key(name: str) -> tuple[int, str]:
        if name.isupper():
            return (0, name)
        return (1 if name[:1].isupper() else 2, name)
    return sorted(names, key=key)


@pytest.mark.parametrize("module", sorted(PUBLIC))
def test_all_is_pinned_sorted_and_importable(module: str) -> None:
    loaded = importlib.import_module(module)
    assert list(loaded.__all__) == PUBLIC[module]
    assert PUBLIC[module] == isort_order(PUBLIC[module])
    for name in PUBLIC[module]:
        assert getattr(loaded, name) is not None, name


def test_the_worker_shells_keep_their_names() -> None:
    tree = ast.parse((SRC / "worker.py").read_text(encoding="utf-8"))
    bound: set[str] = set()
    declared: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            bound.add(node.name)
        elif isinstance(node, ast.Assign):
            names = [target.id for target in node.targets if isinstance(target, ast.Name)]
            bound.update(names)
            if names == ["__all__"]:
                declared = ast.literal_eval(node.value)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            bound.add(node.target.id)
        elif isinstance(node, ast.ImportFrom | ast.Import):
            bound.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
    assert declared == WORKER
    assert sorted(set(WORKER) - bound) == []
