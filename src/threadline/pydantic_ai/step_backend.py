"""The operation backend: each durable operation of a Pydantic AI run is one ``turn.step``.

Pydantic AI hands every model request, tool call and tool discovery of a durable run to
:meth:`TurnOperationBackend.execute` with a name from its journal naming convention
(``support__model.request_stream``, ``support__function_toolset__tools.call_tool:lookup``). The
backend runs it as a step of that name in the active Turn: the step journals the operation's
JSON result, so an Attempt that runs the agent again from the top (after a crash, an eviction, a
retry or a wait) meets its finished operations in the same order and gets their results back
instead of calling the model or the tool again. The names are the steps' journal keys, which is
why they must never change across deploys (``tests/pydantic_ai_engine`` pins them).

What a step's function raises is read once, at this boundary: a model error that asked for a
wait (``Retry-After``) becomes :class:`~threadline.RetryAfter`, so the step waits as the
provider asked without spending an Attempt; a provider's refusal that another try cannot fix
(a 4xx other than 408, 409, 425 and 429) becomes :class:`~threadline.HttpClientError`, which
fails the submission at once; an error of threadline's own tree found among the causes (a
refusal of ``turn.http``, a bad argument) is raised as itself.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import TypeAdapter, ValidationError
from pydantic_ai.durable_exec import (
    CallToolResult,
    DurableOperationConfig,
    DurableOperationId,
    EventStreamHandlerId,
    JournalCallableOperationBackend,
    ToolsetCallToolId,
    ToolsetValidateToolArgumentsId,
    model_error_retry_after,
)
from pydantic_ai.exceptions import ModelHTTPError

from threadline.errors import HttpClientError, RetryAfter, ThreadlineError, ValidationFailed
from threadline.pydantic_ai.active_run import active_run
from threadline.threads.model import JsonValue, StepEffect, check_id
from threadline.threads.retry_policy import RetryPolicy

#: The key of a tool's metadata that configures its step:
#: ``metadata={"threadline": {"effect": "uncertain"}}``, or ``False`` to run it outside a step.
STEP_CONFIG_KEY = "threadline"
#: What a step's configuration may say: its ``effect`` and its in-Attempt ``retry`` policy.
STEP_CONFIG_FIELDS = frozenset({"effect", "retry"})
#: The longest wait a model error's ``Retry-After`` is turned into (366 days, RetryAfter's bound).
MAX_RETRY_AFTER_S = 366 * 86_400.0
#: Statuses of a 4xx answer another try may get past: a timeout, a conflict, "too early" and
#: a rate limit without a ``Retry-After`` (they fail the Attempt, which is retried later).
_TRANSIENT_4XX = frozenset({408, 409, 425, 429})
_NOT_IN_A_NAME = re.compile(r"[^A-Za-z0-9._:-]+")
#: How much of an operation name is kept before the digest of a name that had to be changed.
_NAME_PREFIX = 100
_TOOL_RESULT: TypeAdapter[Any] = TypeAdapter(CallToolResult)

#: A step's configuration as Pydantic AI resolves it: the role's base, merged with a tool's
#: ``threadline`` metadata (see :func:`step_settings`).
StepConfig = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class StepSettings:
    """How one operation runs as a step: its ``effect`` and in-Attempt ``retry`` policy."""

    effect: StepEffect = StepEffect.IDEMPOTENT
    retry: RetryPolicy | None = None


def step_settings(config: StepConfig | None, *, operation: str) -> StepSettings:
    """Read a resolved configuration; a key or value it cannot be raises ``ValidationFailed``
    naming ``operation``, which fails the Attempt for good (the same tool would be refused
    again)."""
    if not config:
        return StepSettings()
    unknown = sorted(str(key) for key in config if key not in STEP_CONFIG_FIELDS)
    if unknown:
        raise ValidationFailed(
            f"{operation}: the {STEP_CONFIG_KEY!r} step configuration takes "
            f"{', '.join(sorted(STEP_CONFIG_FIELDS))}, not {', '.join(unknown)}",
            field=STEP_CONFIG_KEY)
    try:
        effect = StepEffect(config.get("effect", StepEffect.IDEMPOTENT))
    except ValueError:
        raise ValidationFailed(f"{operation}: effect must be idempotent or uncertain",
                               field=STEP_CONFIG_KEY) from None
    retry = config.get("retry")
    if retry is not None and not isinstance(retry, RetryPolicy):
        raise ValidationFailed(f"{operation}: retry must be a threadline.RetryPolicy",
                               field=STEP_CONFIG_KEY)
    return StepSettings(effect, retry)


def step_name(operation_name: str) -> str:
    """The step an operation runs as: its name when it is a step name already
    (``[A-Za-z0-9._:-]``, at most 128 characters), else one made from it, stable across
    deploys: the characters a step name cannot hold replaced by ``-``, cut to 100, and a digest
    of the whole name appended, so two names never meet in one."""
    if is_identifier(operation_name):
        return operation_name
    kept = _NOT_IN_A_NAME.sub("-", operation_name)[:_NAME_PREFIX]
    return f"{kept}.{hashlib.sha256(operation_name.encode()).hexdigest()[:16]}"


def is_identifier(value: str) -> bool:
    """Whether ``value`` can be a step name or an approval key as it is."""
    try:
        check_id(value, field="name")
    except ValidationFailed:
        return False
    return True


def step_error(error: Exception) -> Exception:
    """What a step raises for ``error`` (see the module docstring); ``error`` itself when
    nothing about it is threadline's to decide."""
    own = _own_cause(error)
    if own is not None:
        return own
    seconds = model_error_retry_after(error, maximum=MAX_RETRY_AFTER_S)
    if seconds is not None:
        return RetryAfter(seconds, reason="the model provider asked to wait")
    refused = _model_http_error(error)
    if refused is not None and 400 <= refused.status_code < 500 \
            and refused.status_code not in _TRANSIENT_4XX:
        return HttpClientError(f"model {refused.model_name} answered {refused.status_code}",
                               status=refused.status_code, body=b"")
    return error


def tool_payload(value: JsonValue) -> JsonValue:
    """A tool call step's journaled value as Pydantic AI reads it. An operator who accepts an
    Unknown Outcome gives the value the tool would have returned, not Pydantic AI's encoding
    of a tool's result: such a value is read as that return value."""
    try:
        _TOOL_RESULT.validate_python(value)
    except ValidationError:
        return {"kind": "tool_return", "result": value}
    return value


class TurnOperationBackend(JournalCallableOperationBackend[StepConfig]):
    """Runs each operation of a durable run as a step of the active Turn (module docstring).

    Outside a durable run (the agent run without :func:`~threadline.pydantic_ai.run_durably`)
    an operation runs as it would without threadline. Event handling and the validation of a
    tool's arguments run inline, in no step: the one handler is the capability's own text
    stream, which acts only inside a model request's step, and a validation is the same on
    every run.
    """

    def __init__(
        self, *, agent_name: str, default_model_id: str | None,
        config: DurableOperationConfig[StepConfig],
    ) -> None:
        super().__init__(agent_name=agent_name, default_model_id=default_model_id,
                         config=config)

    async def execute(
        self,
        *,
        operation_id: DurableOperationId,
        name: str,
        body: Callable[[], Awaitable[object]],
        cache_key: tuple[object, ...],
        config: StepConfig,
    ) -> object:
        """Run ``body`` as the step named after ``name`` (see :func:`step_name`)."""
        run = active_run()
        if run is None or isinstance(
                operation_id, EventStreamHandlerId | ToolsetValidateToolArgumentsId):
            return await body()
        settings = step_settings(config, operation=name)

        async def call() -> Any:
            try:
                return await body()
            except Exception as error:
                mapped = step_error(error)
                if mapped is error:
                    raise
                raise mapped from error

        value = await run.turn.step(step_name(name), call, effect=settings.effect,
                                    retry=settings.retry)
        if isinstance(operation_id, ToolsetCallToolId):
            return tool_payload(value)
        return value


def _own_cause(error: BaseException) -> ThreadlineError | None:
    """The first error of threadline's tree among ``error`` and its causes, if any."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, ThreadlineError):
            return current
        current = current.__cause__ or (
            None if current.__suppress_context__ else current.__context__)
    return None


def _model_http_error(error: BaseException) -> ModelHTTPError | None:
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, ModelHTTPError):
            return current
        current = current.__cause__
    return None


__all__ = [
    "MAX_RETRY_AFTER_S",
    "STEP_CONFIG_FIELDS",
    "STEP_CONFIG_KEY",
    "StepConfig",
    "StepSettings",
    "TurnOperationBackend",
    "is_identifier",
    "step_error",
    "step_name",
    "step_settings",
    "tool_payload",
]
