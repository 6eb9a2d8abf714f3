"""The agent registry: which agent functions this deployment can run, by name and version.

A submission names its agent. When this deployment registers no agent of that name the runtime
raises :class:`~threadline.errors.BindingUnavailable` before claiming anything, so the submission
stays exactly as admitted and runs once a deployment registers the agent. The
:func:`binding_registry_key` lets the maintenance pass notice such a deployment: it changes
exactly when the set of registered names and versions does.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from pydantic import BaseModel, ValidationError

from threadline.errors import BindingUnavailable, ValidationFailed
from threadline.threads.model import JsonValue, digest

#: How many of a refused input's field errors the 422 names.
MAX_INPUT_ERRORS = 20

#: An agent as the registry keeps it: an async function of one argument, the Attempt's Turn,
#: returning a JSON value. The argument is typed ``Any`` on purpose: threadline.threads.turn
#: imports this module (through message admission and the agent choice, which check names
#: against the registry), so naming the Turn here would close an import circle.
#: :data:`threadline.threads.turn.AgentFn` is the precise type, the one the application's
#: ``agent`` decorator takes and returns.
_AgentFn = Callable[[Any], Awaitable[Any]]

#: The most Attempts of one agent an object runs at once, when the agent is limited.
MAX_AGENT_CONCURRENCY = 256
#: The most starts a :class:`Rate` may allow per window (each is one stored row).
MAX_RATE_LIMIT = 10_000
#: The shortest and longest window of a :class:`Rate`.
MIN_RATE_WINDOW = timedelta(seconds=1)
MAX_RATE_WINDOW = timedelta(days=1)


@dataclass(frozen=True, slots=True)
class Rate:
    """At most ``limit`` starts of an agent's Attempts in any window of ``per``, across the
    object's Threads: ``Rate(60, per=timedelta(minutes=1))``.

    A start is an Attempt beginning or resuming (after a timer, an approval, a provider's
    ``Retry-After``), since each may call the provider again. ``limit`` is 1 to 10,000;
    ``per`` is 1 s to 1 day in whole milliseconds. Starts are stored, so an eviction does not
    give a provider a second burst.
    """

    limit: int
    per: timedelta

    def __post_init__(self) -> None:
        if isinstance(self.limit, bool) or not isinstance(self.limit, int):
            raise TypeError("Rate limit must be an int")
        if not 1 <= self.limit <= MAX_RATE_LIMIT:
            raise ValueError(f"Rate limit must be 1 to {MAX_RATE_LIMIT:,}, not {self.limit}")
        if not isinstance(self.per, timedelta):
            raise TypeError("Rate per must be a timedelta")
        if not MIN_RATE_WINDOW <= self.per <= MAX_RATE_WINDOW:
            raise ValueError(f"Rate per must be 1 s to 1 day, not {self.per}")
        if self.per % timedelta(milliseconds=1):
            raise ValueError("Rate per must be whole milliseconds")

    @property
    def per_ms(self) -> int:
        """The window in milliseconds."""
        return self.per // timedelta(milliseconds=1)


_NAME = re.compile(r"[A-Za-z0-9._:-]{1,128}")
_VERSION = re.compile(r"[A-Za-z0-9._+-]{1,64}")


@dataclass(frozen=True, slots=True)
class AgentBinding:
    """One registered agent."""

    name: str
    version: str
    fn: _AgentFn
    #: The agent takes input submitted to its Thread while it runs (``turn.followups()``).
    join_followups: bool = False
    #: The pydantic model its input must satisfy (None: any JSON value).
    input_model: type[BaseModel] | None = None
    #: The most of its Attempts the object runs at once (None: only ``native_concurrency``).
    concurrency: int | None = None
    #: How often its Attempts may start (None: unlimited).
    rate: Rate | None = None

    @property
    def limited(self) -> bool:
        """Whether the pass holds this agent's starts to a concurrency or a rate."""
        return self.concurrency is not None or self.rate is not None

    def check_input(self, value: JsonValue) -> JsonValue:
        """``value`` if the agent may be given it: valid for its ``input_model``, when it has
        one. Otherwise :class:`ValidationFailed` (422) naming each field in error, so a
        refused admission writes nothing."""
        if self.input_model is not None:
            self.parse_input(value)
        return value

    def parse_input(self, value: JsonValue) -> Any:
        """``value`` parsed by the agent's ``input_model`` (the value itself without one)."""
        if self.input_model is None:
            return value
        try:
            return self.input_model.model_validate(value)
        except ValidationError as error:
            problems = [f"input{''.join(f'.{part}' for part in item['loc'])}: {item['msg']}"
                        for item in error.errors(include_url=False)[:MAX_INPUT_ERRORS]]
            raise ValidationFailed(f"input does not fit agent {self.name!r}: "
                                   + "; ".join(problems), field="input") from None


class AgentRegistry:
    """Agents by name. Registration happens at import time; lookups happen per Attempt."""

    def __init__(self) -> None:
        self._bindings: dict[str, AgentBinding] = {}

    def register(
        self, name: str, fn: _AgentFn, *, version: str = "1", join_followups: bool = False,
        input_model: type[BaseModel] | None = None, concurrency: int | None = None,
        rate: Rate | None = None,
    ) -> AgentBinding:
        """Register ``fn`` as the agent ``name``; a second registration of a name is an error.

        ``join_followups`` lets its Attempts collect input queued behind them with
        :meth:`~threadline.Turn.followups` instead of leaving it to run after them.
        ``input_model`` (a pydantic model class) is what its input must satisfy at admission.
        ``concurrency`` (1 to 256) and ``rate`` (a :class:`Rate`) bound how many of its
        Attempts run at once and how often they start, across the object's Threads.
        """
        if _NAME.fullmatch(name) is None or name in (".", ".."):
            # "." and ".." match the pattern, but admission refuses them as ids (no URL can
            # carry them), so an agent so named could never be submitted to.
            raise ValueError(
                f"agent name {name!r} must match [A-Za-z0-9._:-]{{1,128}} and not be . or .."
            )
        if _VERSION.fullmatch(version) is None:
            raise ValueError(f"agent version {version!r} must match [A-Za-z0-9._+-]{{1,64}}")
        if not inspect.iscoroutinefunction(fn):
            raise TypeError(f"agent {name!r} must be an async function taking a Turn")
        if not isinstance(join_followups, bool):
            raise TypeError("join_followups must be True or False")
        if input_model is not None and not (
                isinstance(input_model, type) and issubclass(input_model, BaseModel)):
            raise TypeError(f"agent {name!r}: input must be a pydantic model class")
        if concurrency is not None and (
                isinstance(concurrency, bool) or not isinstance(concurrency, int)):
            raise TypeError(f"agent {name!r}: concurrency must be an int or None")
        if concurrency is not None and not 1 <= concurrency <= MAX_AGENT_CONCURRENCY:
            raise ValueError(f"agent {name!r}: concurrency must be 1 to "
                             f"{MAX_AGENT_CONCURRENCY}, not {concurrency}")
        if rate is not None and not isinstance(rate, Rate):
            raise TypeError(f"agent {name!r}: rate must be a threadline.Rate or None")
        if name in self._bindings:
            raise ValueError(f"agent {name!r} is already registered")
        binding = AgentBinding(name, version, fn, join_followups, input_model, concurrency,
                               rate)
        self._bindings[name] = binding
        return binding

    def resolve(self, name: str) -> AgentBinding:
        """The binding for ``name``; raises :class:`BindingUnavailable` when there is none."""
        binding = self._bindings.get(name)
        if binding is None:
            raise BindingUnavailable(name)
        return binding

    def check_input(self, name: str, value: JsonValue) -> JsonValue:
        """``value`` if agent ``name`` may be given it (see :meth:`AgentBinding.check_input`);
        an agent this deployment does not register takes any input."""
        binding = self._bindings.get(name)
        return value if binding is None else binding.check_input(value)

    def __contains__(self, name: object) -> bool:
        return name in self._bindings

    def __iter__(self) -> Iterator[AgentBinding]:
        return iter(sorted(self._bindings.values(), key=lambda binding: binding.name))

    def __len__(self) -> int:
        return len(self._bindings)

    @property
    def key(self) -> str:
        """See :func:`binding_registry_key`."""
        return binding_registry_key(self)


def binding_registry_key(registry: AgentRegistry) -> str:
    """A stable hash of the registered agent names and versions.

    Independent of registration order and of the functions' identities, so the same deployment
    gives the same key after every eviction, and only adding, removing or re-versioning an agent
    changes it.
    """
    parts: list[str] = ["threadline-agents:v1"]
    for binding in registry:
        parts.extend((binding.name, binding.version))
    return digest(*parts)


__all__ = [
    "MAX_AGENT_CONCURRENCY",
    "MAX_INPUT_ERRORS",
    "MAX_RATE_LIMIT",
    "MAX_RATE_WINDOW",
    "MIN_RATE_WINDOW",
    "AgentBinding",
    "AgentRegistry",
    "Rate",
    "binding_registry_key",
]
