"""Per-agent permits: how many of a limited agent's Attempts the pass may start now.

An agent registered with ``concurrency=N`` runs at most ``N`` Attempts at once in the object;
one with ``rate=Rate(limit, per)`` starts at most ``limit`` of them in any window of ``per``
(a sliding window over the starts themselves, so no burst at a window's edge exceeds it). Only
the pass starts Attempts, so the Attempts it runs are the object's: concurrency is counted in
memory. Starts are kept in memory too and written to ``tl_agent_starts`` as they are taken,
the newest ``limit`` per agent, so an incarnation rebuilt after an eviction reads the window
it is in instead of granting a provider a second burst.

A Thread whose head waits for a permit is left as it is: no row is written for it and the pass
reads nothing again for it. The dispatch loop asks again when an Attempt ends or the earliest
start leaves its window (:meth:`AgentPermits.frees_at`); the checkpoint arms the native lane
at that time instead of now, so waiting costs no alarm churn.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Iterable, Mapping

from threadline.errors import ThreadlineError
from threadline.maintenance.view import ThreadView
from threadline.storage.port import Storage
from threadline.threads.agents import AgentBinding, AgentRegistry, Rate
from threadline.threads.model import CLAIMABLE

_logger = logging.getLogger("threadline.maintenance")

_NEWEST = ("SELECT started_at FROM tl_agent_starts WHERE agent = ?"
           " ORDER BY started_at DESC LIMIT ?")
_INSERT = "INSERT INTO tl_agent_starts (agent, started_at) VALUES (?, ?)"
_DROP_BEFORE = "DELETE FROM tl_agent_starts WHERE agent = ? AND started_at < ?"


class AgentPermits:
    """The permits of the limited agents of one incarnation (see the module docstring)."""

    def __init__(
        self, storage: Storage, registry: AgentRegistry,
        log: Callable[[str], None] | None = None,
    ) -> None:
        self._storage = storage
        self._registry = registry
        self._log = log if log is not None else _logger.error
        #: Per rate-limited agent, its starts inside the window, oldest first (loaded lazily).
        self._starts: dict[str, deque[int]] = {}
        #: Per rate-limited agent, how many rows of its starts are stored (at least).
        self._stored: dict[str, int] = {}
        #: Per limited agent, the Thread it last started an Attempt of (its own round-robin).
        self._served: dict[str, str] = {}

    def limited_agent(self, view: ThreadView) -> AgentBinding | None:
        """The limited agent ``view``'s head would start, or None (no head to start, an
        accepted abort to settle, or an agent with no limit)."""
        head = view.head
        if head is None or head.state not in CLAIMABLE or head.agent not in self._registry:
            return None
        binding = self._registry.resolve(head.agent)
        return binding if binding.limited else None

    def allowance(self, binding: AgentBinding, now: int, running: int) -> int:
        """How many more of ``binding``'s Attempts may start at ``now`` with ``running`` of
        them running (a large number for a limit it does not have)."""
        left = 1 << 30
        if binding.concurrency is not None:
            left = binding.concurrency - running
        if binding.rate is not None:
            left = min(left, binding.rate.limit - len(self._window(binding, now)))
        return max(left, 0)

    def allowed(self, ordered: Iterable[ThreadView], now: int,
                running: Mapping[str, int]) -> set[str]:
        """The Threads among ``ordered`` (sorted by Thread id) whose limited head may start at
        ``now``: per agent, as many as its permits allow, round-robin after the Thread it
        served last (:meth:`served`).

        Each agent keeps its own turn because the pass's cursor serves every agent at once:
        it moves past a Thread held for a permit whenever a Thread after it is served, and a
        Thread held each time the cursor passed it would wait for all the input of the
        Threads before it.
        """
        allowed: set[str] = set()
        for name, (binding, views) in self._by_agent(ordered).items():
            left = self.allowance(binding, now, running.get(name, 0))
            last = self._served.get(name)
            turn = sorted(views, key=lambda view: _after(view.thread_id, last))
            allowed.update(view.thread_id for view in turn[:left])
        return allowed

    def served(self, chosen: Iterable[ThreadView]) -> None:
        """Record the limited Threads ``chosen`` (an agent's next turn is after its last)."""
        last: dict[str, str] = {}
        for view in chosen:
            binding = self.limited_agent(view)
            if binding is None:
                continue
            name = binding.name
            before = self._served.get(name)
            if name not in last or (_after(view.thread_id, before)
                                    > _after(last[name], before)):
                last[name] = view.thread_id
        self._served.update(last)

    def take(self, binding: AgentBinding, now: int) -> None:
        """Record that one of ``binding``'s Attempts starts at ``now``.

        Storage refusing the row leaves the start counted in memory: this incarnation still
        holds the rate, and the next one may allow that one start more than the window does.
        """
        rate = binding.rate
        if rate is None:
            return
        name = binding.name
        window = self._window(binding, now)
        window.append(now)
        try:
            self._storage.exec(_INSERT, name, now)
            self._stored[name] += 1
            if self._stored[name] > rate.limit:
                # Rows older than the oldest start in the window can never count again: one
                # delete per ``limit`` starts at most keeps ``limit + 1`` rows per agent.
                self._storage.exec(_DROP_BEFORE, name, window[0])
                self._stored[name] = len(window)
        except ThreadlineError as exc:
            self._log(f"threadline: could not store a start of agent {binding.name!r} "
                      f"({type(exc).__name__}); this object still holds its rate")

    def frees_at(self, binding: AgentBinding, now: int) -> int | None:
        """When ``binding`` next gains a permit by time alone: when the oldest start in its
        window leaves it, if the rate is what holds it. None when time frees nothing (no
        rate, or the rate has room and only concurrency holds it)."""
        rate = binding.rate
        if rate is None:
            return None
        window = self._window(binding, now)
        if len(window) < rate.limit:
            return None
        return window[0] + rate.per_ms

    def next_free(self, views: Iterable[ThreadView], now: int) -> int | None:
        """The earliest :meth:`frees_at` of the limited agents ``views``' heads wait for."""
        times = [at for binding, _ in self._by_agent(views).values()
                 if (at := self.frees_at(binding, now)) is not None]
        return min(times) if times else None

    def held(self, views: Iterable[ThreadView], now: int,
             running: Mapping[str, int]) -> dict[str, int]:
        """The Threads among ``views`` whose head may not start at ``now`` for want of a
        permit, each with when time frees one (``now`` when only concurrency holds it)."""
        held: dict[str, int] = {}
        for view in views:
            binding = self.limited_agent(view)
            if binding is None or self.allowance(
                    binding, now, running.get(binding.name, 0)) > 0:
                continue
            held[view.thread_id] = self.frees_at(binding, now) or now
        return held

    def _by_agent(
        self, views: Iterable[ThreadView]
    ) -> dict[str, tuple[AgentBinding, list[ThreadView]]]:
        """The views whose head a limited agent would start, by that agent (in their order)."""
        grouped: dict[str, tuple[AgentBinding, list[ThreadView]]] = {}
        for view in views:
            binding = self.limited_agent(view)
            if binding is not None:
                grouped.setdefault(binding.name, (binding, []))[1].append(view)
        return grouped

    def _window(self, binding: AgentBinding, now: int) -> deque[int]:
        rate = binding.rate
        window = self._starts.get(binding.name)
        if window is None:
            window = self._load(binding.name, rate)
            self._starts[binding.name] = window
        if rate is not None:
            while window and window[0] <= now - rate.per_ms:
                window.popleft()
        return window

    def _load(self, agent: str, rate: Rate | None) -> deque[int]:
        self._stored[agent] = 0
        if rate is None:
            return deque()
        try:
            rows = self._storage.exec(_NEWEST, agent, rate.limit).rows
        except ThreadlineError as exc:
            self._log(f"threadline: could not read the recent starts of agent {agent!r} "
                      f"({type(exc).__name__}); its window starts empty")
            return deque()
        # Only the newest ``limit`` rows are read; older ones go with the next delete.
        self._stored[agent] = len(rows)
        return deque(sorted(int(row["started_at"]) for row in rows))


def _after(thread_id: str, last: str | None) -> tuple[bool, str]:
    """Where ``thread_id`` comes in a round-robin that starts after ``last``."""
    return (last is not None and thread_id <= last, thread_id)


__all__ = ["AgentPermits"]
