"""Identifier sources. The core asks an injected :class:`IdSource` for every new id."""

from __future__ import annotations

import itertools
import random
from typing import Protocol, runtime_checkable


@runtime_checkable
class IdSource(Protocol):
    """Makes new unique identifiers such as ``sub_3f9a...``."""

    def new_id(self, prefix: str) -> str:
        """A fresh identifier starting with ``prefix`` and an underscore."""
        ...


class RandomIds:
    """128-bit random identifiers drawn from an injected ``random.Random``.

    Production passes ``random.SystemRandom()``; tests pass a seeded ``random.Random``.
    """

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng

    def new_id(self, prefix: str) -> str:
        """A fresh identifier: the prefix, an underscore and 32 hex digits."""
        return f"{prefix}_{self._rng.getrandbits(128):032x}"


class SequentialIds:
    """Readable, predictable identifiers for tests: ``sub_000001``, ``sub_000002``, ..."""

    def __init__(self) -> None:
        self._counter = itertools.count(1)

    def new_id(self, prefix: str) -> str:
        """The next identifier in sequence, shared across prefixes."""
        return f"{prefix}_{next(self._counter):06d}"


__all__ = ["IdSource", "RandomIds", "SequentialIds"]
