"""Which agent a new submission to a Thread runs, read from the Thread itself.

Admission over HTTP, a schedule's fire and a message from another Thread all choose with
:func:`choose_agent` (the one named, else the Thread's latest, else the deployment's only one);
an Attempt's ``turn.submit`` falls back on the Thread's latest agent too. Every answer comes
from indexed seeks into the target Thread's submissions, admitted or still scheduled.
"""

from __future__ import annotations

from threadline.errors import ValidationFailed
from threadline.storage.port import Storage
from threadline.threads import delayed
from threadline.threads.agents import AgentRegistry

_KEYED_AGENT = "SELECT agent FROM tl_submissions WHERE thread_id = ? AND idempotency_key = ?"
_LATEST_AGENT = "SELECT agent FROM tl_submissions WHERE thread_id = ? ORDER BY seq DESC LIMIT 1"


def choose_agent(
    storage: Storage,
    agents: AgentRegistry,
    thread: str,
    named: str | None,
    idempotency_key: str | None = None,
) -> str:
    """The agent a new submission to ``thread`` runs: the one named, else the Thread's last,
    else the deployment's only one.

    A replayed idempotency key keeps the agent of its first admission, so a replay that names
    no agent (or the same one) is answered as a replay even if the Thread has moved on to
    another agent, or this deployment no longer registers that one. Otherwise an agent this
    deployment does not register is refused (:class:`ValidationFailed` on ``agent``):
    admitting it would park the submission until some deployment registers that name, which
    for a typo is never.
    """
    if idempotency_key is not None:
        prior = keyed_agent(storage, thread, idempotency_key)
        if prior is not None and named in (None, prior):
            return prior
    agent = named if named is not None else latest_agent(storage, thread)
    registered = [binding.name for binding in agents]
    if agent is None:
        if len(registered) == 1:
            return registered[0]
        raise ValidationFailed(
            "agent is required: this deployment registers "
            + (", ".join(registered) if registered else "no agents"),
            field="agent",
        )
    if agent not in agents:
        raise ValidationFailed(
            f"agent {agent!r} is not registered; registered: {', '.join(registered) or 'none'}",
            field="agent",
        )
    return agent


def keyed_agent(storage: Storage, thread_id: str, idempotency_key: str) -> str | None:
    """The agent of the Thread's submission made with ``idempotency_key`` (admitted or still
    scheduled), if any."""
    row = storage.exec(_KEYED_AGENT, thread_id, idempotency_key).first()
    if row is not None:
        return str(row["agent"])
    waiting = delayed.by_key(storage, thread_id, idempotency_key)
    return None if waiting is None else waiting.agent


def latest_agent(storage: Storage, thread_id: str) -> str | None:
    """The agent the Thread's newest submission named, or None for a new Thread."""
    row = storage.exec(_LATEST_AGENT, thread_id).first()
    return None if row is None else str(row["agent"])


__all__ = ["choose_agent", "keyed_agent", "latest_agent"]
