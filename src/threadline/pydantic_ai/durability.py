"""``ThreadlineDurability``: the capability that makes a Pydantic AI agent durable in a Turn.

Built on Pydantic AI's engine surface (``BaseDurabilityCapability`` with a callable operation
backend): the base owns the model, toolset and event machinery and hands each durable operation
to :class:`~threadline.pydantic_ai.step_backend.TurnOperationBackend`, which runs it as a
``turn.step``. What this class declares is how threadline executes:

- **JSON journal.** A step journals JSON, so every result crosses as Pydantic AI's JSON form
  (``JSON_CODEC``); a value that has none fails the submission at once (``NonRetryable``).
- **Tools one at a time.** Steps are keyed by name and occurrence, so a replay must meet them
  in the order it first did; tool calls of one model response therefore run one after another
  inside a durable run (``sequential_tools_in_durable_context``).
- **Per-tool steps.** A tool's ``metadata={"threadline": {"effect": "uncertain"}}`` runs its
  call as an uncertain step (a crash inside it is an Unknown Outcome, never a second call);
  ``{"retry": RetryPolicy(...)}`` tries it again within the Attempt; ``False`` runs it outside
  any step (it runs again on every replay).
- **Approvals.** A tool that needs approval (``requires_approval=True``, or one that raises
  ``ApprovalRequired``) asks ``turn.approval`` with a key from its tool call id: the run
  suspends durably until someone decides it over the API, and a replay gets the decision.
- **Control flow passes through.** The runtime's signals (suspend, yield, lease lost) and a
  simulated eviction are ``BaseException`` s the core must let through, not tool failures.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic_ai.durable_exec import (
    JSON_CODEC,
    BaseDurabilityCapability,
    DurabilityEngineSpec,
    DurableOperationBackend,
    DurableOperationId,
    RoleBasedOperationConfig,
)
from pydantic_ai.models import Model
from pydantic_ai.tools import (
    AgentDepsT,
    DeferredToolRequests,
    DeferredToolResults,
    RunContext,
    ToolDenied,
)
from pydantic_ai.toolsets import ToolsetTool

from threadline.errors import Evicted, NonRetryable
from threadline.pydantic_ai.active_run import active_run
from threadline.pydantic_ai.step_backend import (
    STEP_CONFIG_KEY,
    StepConfig,
    TurnOperationBackend,
    is_identifier,
)
from threadline.pydantic_ai.text_stream import stream_text
from threadline.threads.retry_policy import RetryPolicy
from threadline.threads.signals import ControlSignal
from threadline.threads.turn import check_kind

#: What the model is told of a declined call when the decision carries no text of its own.
DECLINED = "The tool call was declined."


def _not_journalable(error: Exception) -> BaseException:
    # The same value fails the same way on every try: no retry can journal it.
    return NonRetryable(f"a durable operation's result has no JSON form to journal: {error}")


@dataclass(init=False, kw_only=True)
class ThreadlineDurability(BaseDurabilityCapability[AgentDepsT]):
    """Makes an agent durable when it runs through :func:`~threadline.pydantic_ai.run_durably`
    inside a threadline agent (see the module docstring for what that means).

    Outside ``run_durably`` the agent runs as it would without this capability. ``name`` names
    the agent's steps (default: the agent's own ``name``; one of the two is required) and, like
    a toolset's ``id``, must stay the same across deploys. ``models`` registers further models
    a run may switch to. With ``stream`` (the default) every model request streams, and its
    text reaches the Thread's readers through ``turn.stream`` as one ``message_kind`` record
    per message; ``stream=False`` requests whole answers and stores no message records of the
    model's. ``model_retry`` and ``tool_retry`` are the steps' in-Attempt
    :class:`~threadline.RetryPolicy` (default: one try, then the Attempt's own retries).
    """

    engine_spec = DurabilityEngineSpec(
        engine_name="threadline",
        durable_unit_noun="step",
        durable_container_noun="turn",
        codec=JSON_CODEC,
        serialization_failure=_not_journalable,
        tool_config_key=STEP_CONFIG_KEY,
        sequential_tools_in_durable_context=True,
        # Tools added to one run are never wrapped in steps, so they are refused inside one.
        unsupported_runtime_toolset_kinds=frozenset({"function", "mcp", "dynamic"}),
        control_flow_error_types=(ControlSignal, Evicted),
    )

    def __init__(
        self,
        *,
        name: str | None = None,
        models: Mapping[str, Model] | None = None,
        stream: bool = True,
        message_kind: str = "message",
        model_retry: RetryPolicy | None = None,
        tool_retry: RetryPolicy | None = None,
    ) -> None:
        check_kind(message_kind)
        for policy in (model_retry, tool_retry):
            if policy is not None and not isinstance(policy, RetryPolicy):
                raise TypeError("model_retry and tool_retry are threadline.RetryPolicy values")
        super().__init__(models=models, event_stream_handler=stream_text if stream else None,
                         name=name)
        self.message_kind = message_kind
        self._model_config: StepConfig = {} if model_retry is None else {"retry": model_retry}
        self._tool_config: StepConfig = {} if tool_retry is None else {"retry": tool_retry}

    @property
    def in_durable_context(self) -> bool:
        """True inside :func:`~threadline.pydantic_ai.run_durably`."""
        return active_run() is not None

    def get_durable_operation_backend(self) -> DurableOperationBackend[StepConfig]:
        """The backend that runs each operation as a step of the active Turn."""

        def tool_config(
            operation_id: DurableOperationId, tool: object | None, tool_name: str
        ) -> StepConfig | Literal[False]:
            resolve = self._build_resolve_tool_config(self._tool_config)
            return resolve(tool if isinstance(tool, ToolsetTool) else None, tool_name)

        return TurnOperationBackend(
            agent_name=self.name,
            default_model_id=self.default_model_id,
            config=RoleBasedOperationConfig(
                model=self._model_config, event={}, capability={}, tool=self._tool_config,
                resolve_tool=tool_config,
            ),
        )

    async def handle_deferred_tool_calls(
        self, ctx: RunContext[AgentDepsT], *, requests: DeferredToolRequests
    ) -> DeferredToolResults | None:
        """Ask ``turn.approval`` for each call that needs approval, in order.

        The first call not decided yet suspends the submission; once someone decides it, the
        submission runs again, the run replays to here and gets the decision back. An approval
        lets the call run; a decline tells the model the decision's payload when it is text,
        else :data:`DECLINED`. Calls to be executed elsewhere are left to other capabilities.
        """
        run = active_run()
        if run is None or not requests.approvals:
            return None
        decided: dict[str, bool | ToolDenied] = {}
        for call in requests.approvals:
            payload: dict[str, Any] = {"tool": call.tool_name, "args": call.args_as_dict(),
                                       "tool_call_id": call.tool_call_id}
            if call.tool_call_id in requests.metadata:
                payload["metadata"] = requests.metadata[call.tool_call_id]
            decision = await run.turn.approval(approval_key(call.tool_call_id), payload)
            if decision.approved:
                decided[call.tool_call_id] = True
            else:
                said = decision.payload
                decided[call.tool_call_id] = ToolDenied(said if isinstance(said, str) and said
                                                        else DECLINED)
        return DeferredToolResults(approvals=dict(decided))


def approval_key(tool_call_id: str) -> str:
    """The ``turn.approval`` key of a tool call: its id when that is a valid key, else
    ``call-`` and a digest of it (stable, so a replay asks for the same approval)."""
    if is_identifier(tool_call_id):
        return tool_call_id
    return "call-" + hashlib.sha256(tool_call_id.encode()).hexdigest()[:32]


__all__ = ["DECLINED", "ThreadlineDurability", "approval_key"]
