"""threadline: durable agent threads for Cloudflare Python Workers.

Importing this package never imports the ``workers`` SDK, ``js`` or ``pyodide``; the platform
shells live in :mod:`threadline.worker`, imported only by a Worker's entry module.
"""

from threadline import access
from threadline.access import AccessRequest, Capability, Principal
from threadline.app import Application
from threadline.clock import Clock, ManualClock, SystemClock
from threadline.config import RuntimeConfig
from threadline.delivery.subscribers import DeliveryContext, SubscriberSpec
from threadline.delivery.webhooks import verify_signature
from threadline.environment import Environment
from threadline.errors import (
    AgentError,
    AnswerTooLarge,
    ApiError,
    BindingUnavailable,
    Conflict,
    DeliveryRefused,
    ErrorCode,
    Evicted,
    Forbidden,
    HttpClientError,
    HttpError,
    HttpServerError,
    HttpStatusError,
    HttpTimeout,
    HttpTransportError,
    InvalidSchedule,
    NonRetryable,
    NotFound,
    PayloadTooLarge,
    RetryableAgentError,
    RetryAfter,
    SchedulingError,
    SchemaError,
    SignatureInvalid,
    StorageError,
    ThreadlineError,
    Unauthorized,
    ValidationFailed,
)
from threadline.ids import IdSource, RandomIds, SequentialIds
from threadline.maintenance import PassReport
from threadline.maintenance.faults import Fault, RecoveryEvent
from threadline.maintenance.host_lanes import LaneContext, LanePhase
from threadline.maintenance.schedule_context import ScheduleContext
from threadline.schedules import CronSchedule, EverySchedule
from threadline.space import Space
from threadline.storage import SqliteStorage, Storage
from threadline.threads import ApprovalDecision, Followup, RetryPolicy, Turn
from threadline.threads.agents import Rate
from threadline.threads.records import Record
from threadline.threads.turn_http import HttpAnswer, HttpStream

__version__ = "0.1.0"

__all__ = [
    "AccessRequest",
    "AgentError",
    "AnswerTooLarge",
    "ApiError",
    "Application",
    "ApprovalDecision",
    "BindingUnavailable",
    "Capability",
    "Clock",
    "Conflict",
    "CronSchedule",
    "DeliveryContext",
    "DeliveryRefused",
    "Environment",
    "ErrorCode",
    "EverySchedule",
    "Evicted",
    "Fault",
    "Followup",
    "Forbidden",
    "HttpAnswer",
    "HttpClientError",
    "HttpError",
    "HttpServerError",
    "HttpStatusError",
    "HttpStream",
    "HttpTimeout",
    "HttpTransportError",
    "IdSource",
    "InvalidSchedule",
    "LaneContext",
    "LanePhase",
    "ManualClock",
    "NonRetryable",
    "NotFound",
    "PassReport",
    "PayloadTooLarge",
    "Principal",
    "RandomIds",
    "Rate",
    "Record",
    "RecoveryEvent",
    "RetryAfter",
    "RetryPolicy",
    "RetryableAgentError",
    "RuntimeConfig",
    "ScheduleContext",
    "SchedulingError",
    "SchemaError",
    "SequentialIds",
    "SignatureInvalid",
    "Space",
    "SqliteStorage",
    "Storage",
    "StorageError",
    "SubscriberSpec",
    "SystemClock",
    "ThreadlineError",
    "Turn",
    "Unauthorized",
    "ValidationFailed",
    "access",
    "verify_signature",
]
