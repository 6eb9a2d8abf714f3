"""``run_durably``: one Pydantic AI agent run inside a threadline agent, durable in its Turn.

A run goes in four parts, each durable:

1. **The conversation so far.** The Thread's earlier ``pydantic_ai.messages`` records (one per
   completed run, newest first up to ``history_limit`` and half of ``max_value_bytes``) are the
   run's message history, read with ``turn.history`` (journaled, so a replay gets the same).
2. **The prompt.** A text prompt is appended to the Thread's log as a ``message`` record
   (``{"role": "user", "text"}``), once across replays, so the Thread's readers see it.
3. **The run.** ``agent.run`` with the Turn active: each model request and tool call is a step
   (:mod:`threadline.pydantic_ai.step_backend`), each streamed answer one ``message`` record
   (:mod:`threadline.pydantic_ai.text_stream`), each approval a ``turn.approval``. Its
   ``run_id`` is the submission's id and the run's place in it, and its ``conversation_id``
   the Thread's id, so a replay is the same run.
4. **What it added.** The run's new messages are appended as one ``pydantic_ai.messages``
   record (``{"messages": [...]}``, Pydantic AI's JSON form), the history of the next run.
   A run whose messages do not fit ``max_value_bytes`` keeps its first request and its last
   response only (the prompt and the answer); if even those do not fit, the run adds none.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Executor, Future
from contextlib import suppress
from typing import Any, TypeVar
from weakref import WeakKeyDictionary

from pydantic import ValidationError
from pydantic_ai import Agent
from pydantic_ai.agent import AbstractAgent
from pydantic_ai.exceptions import UserError
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter, ModelRequest, ModelResponse
from pydantic_ai.run import AgentRunResult

from threadline.errors import Evicted, NonRetryable, ValidationFailed, ValueTooLarge
from threadline.pydantic_ai.active_run import ActiveRun, active_run, running
from threadline.pydantic_ai.durability import ThreadlineDurability
from threadline.threads.signals import ControlSignal
from threadline.threads.turn import Turn

#: The kind of the record holding one run's new messages: the history of later runs.
MESSAGES_KIND = "pydantic_ai.messages"
#: How many earlier runs' messages a run gets by default.
DEFAULT_HISTORY_RUNS = 50

#: Runs started per Turn so far: the next run's place in its submission.
_RUNS: WeakKeyDictionary[Turn, int] = WeakKeyDictionary()
T = TypeVar("T")


class InlineExecutor(Executor):
    """Runs each function it is given at once, in the caller's thread.

    Pydantic AI runs a sync tool or callback in a thread; a durable run runs it inline, in the
    Attempt, as it must under workerd (Pyodide has no threads): so a run behaves the same under
    CPython, and a test's clock, which moves when the Attempt waits, never races a thread.
    """

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        """Call ``fn`` now; a future that holds what it returned or raised."""
        done: Future[T] = Future()
        try:
            done.set_result(fn(*args, **kwargs))
        except BaseException as error:
            done.set_exception(error)
        return done


_INLINE = InlineExecutor()


async def run_durably(
    turn: Turn,
    agent: AbstractAgent[Any, Any],
    prompt: str | Sequence[Any] | None = None,
    *,
    history: bool = True,
    history_limit: int = DEFAULT_HISTORY_RUNS,
    **options: Any,
) -> AgentRunResult[Any]:
    """Run ``agent`` on ``prompt`` durably in ``turn`` (see the module docstring).

    ``agent`` carries a :class:`~threadline.pydantic_ai.ThreadlineDurability` capability.
    ``history=False`` starts from no earlier messages; a ``message_history`` in ``options``
    replaces the Thread's. Every other keyword (``deps``, ``output_type``, ``model_settings``,
    ``usage_limits``...) is ``agent.run``'s. Returns the run's result; what the agent does with
    it outside a step must be deterministic, as everything an agent does outside steps.
    Pydantic AI's ``UserError`` (a mistake in how the agent is built or run) fails the
    submission at once, as ``NonRetryable``.
    """
    durability = ThreadlineDurability.from_agent(agent)
    if durability is None:
        raise ValidationFailed("run_durably needs an agent built with "
                               "capabilities=[ThreadlineDurability()]", field="agent")
    if active_run() is not None:
        raise ValidationFailed("run_durably runs one agent per call: an agent run inside "
                               "another's step is not durable on its own", field="agent")
    earlier = options.pop("message_history", None)
    if earlier is None and history:
        earlier = await earlier_messages(turn, limit=history_limit)
    if isinstance(prompt, str):
        await turn.emit({"role": "user", "text": prompt}, kind=durability.message_kind)
    place = _RUNS.get(turn, 0) + 1
    _RUNS[turn] = place
    options.setdefault("run_id", f"{turn.submission_id}.run{place}")
    options.setdefault("conversation_id", turn.thread_id)
    with running(ActiveRun(turn, durability.message_kind)), Agent.using_thread_executor(_INLINE):
        try:
            result = await agent.run(prompt, message_history=earlier or None, **options)
        except UserError as error:
            # Pydantic AI's word for a mistake in how the agent is built or run: running the
            # same code again cannot fix it.
            raise NonRetryable(f"Pydantic AI refused the run: {error}") from error
        except BaseExceptionGroup as group:
            signal = _signal_in(group)
            if signal is None:
                raise
            raise signal from None
    await _keep(turn, result.new_messages())
    return result


async def earlier_messages(turn: Turn, *, limit: int = DEFAULT_HISTORY_RUNS) -> list[ModelMessage]:
    """The messages of the Thread's earlier runs, oldest first (``limit`` runs at most). A
    record this version of Pydantic AI cannot read (one written by another) is left out."""
    records = await turn.history(kinds=[MESSAGES_KIND], limit=limit)
    messages: list[ModelMessage] = []
    for record in records:
        body = record.body
        if not isinstance(body, dict):
            continue
        try:
            messages.extend(ModelMessagesTypeAdapter.validate_python(body.get("messages")))
        except ValidationError:
            continue
    return messages


async def _keep(turn: Turn, added: list[ModelMessage]) -> None:
    if not added:
        return
    try:
        await turn.emit({"messages": _json(added)}, kind=MESSAGES_KIND)
        return
    except ValueTooLarge:
        pass
    first, last = added[0], added[-1]
    if isinstance(first, ModelRequest) and isinstance(last, ModelResponse):
        with suppress(ValueTooLarge):
            await turn.emit({"messages": _json([first, last])}, kind=MESSAGES_KIND)


def _json(messages: Sequence[ModelMessage]) -> Any:
    return ModelMessagesTypeAdapter.dump_python(list(messages), mode="json")


def _signal_in(group: BaseExceptionGroup[Any]) -> BaseException | None:
    """The first runtime signal or eviction in ``group``: what a task group around the run
    wrapped, and the runtime must see as itself."""
    for error in group.exceptions:
        if isinstance(error, BaseExceptionGroup):
            found = _signal_in(error)
            if found is not None:
                return found
        elif isinstance(error, ControlSignal | Evicted):
            return error
    return None


__all__ = [
    "DEFAULT_HISTORY_RUNS",
    "MESSAGES_KIND",
    "InlineExecutor",
    "earlier_messages",
    "run_durably",
]
