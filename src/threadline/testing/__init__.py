"""Test kit: run a threadline object, or several, in plain pytest, without workerd.

Each tool lives in a module of its own (the simulated object and deployment, the thread harness,
the alarm-invariant checker, storage faults, counters, a fake outbound port and a fake model
provider) and is imported from here, as ``from threadline.testing import SimulatedObject``.
Importing this package never imports the ``workers`` SDK, ``js`` or ``pyodide``.
"""

from __future__ import annotations

from threadline.testing.alarm_invariants import (
    AlarmInvariantError,
    QuiescenceError,
    alarm_invariant_problem,
)
from threadline.testing.counters import Effects, SettlementLog
from threadline.testing.deployment import (
    Delivery,
    DeliveryFailure,
    HungTarget,
    SimulatedDeployment,
)
from threadline.testing.fake_fetch import FakeAnswer, FakeFetch
from threadline.testing.fake_provider import FakeProvider, Refusal
from threadline.testing.simulated_object import DEFAULT_MAX_PASSES, SimulatedObject
from threadline.testing.storage_faults import Crash, StatementFailure, is_eviction
from threadline.testing.thread_harness import ThreadHarness

__all__ = [
    "DEFAULT_MAX_PASSES",
    "AlarmInvariantError",
    "Crash",
    "Delivery",
    "DeliveryFailure",
    "Effects",
    "FakeAnswer",
    "FakeFetch",
    "FakeProvider",
    "HungTarget",
    "QuiescenceError",
    "Refusal",
    "SettlementLog",
    "SimulatedDeployment",
    "SimulatedObject",
    "StatementFailure",
    "ThreadHarness",
    "alarm_invariant_problem",
    "is_eviction",
]
