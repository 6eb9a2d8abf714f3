"""OpenAI-compatible models whose requests go out through ``turn.http``.

Needs the ``openai`` package (``threadline[pydantic-ai]`` installs it). :func:`openai_client`
builds the ``AsyncOpenAI`` client Pydantic AI's OpenAI models take, on a
:class:`~threadline.pydantic_ai.TurnTransport` and with the SDK's own retries off: a 429 or
5xx is the step's to wait out or retry (``Retry-After`` becomes :class:`~threadline.RetryAfter`,
waited on the object's clock, a long wait on a durable timer), never a sleep of the SDK's in the
Attempt. :func:`openai_model` wraps it in an ``OpenAIChatModel``.

The API key may come from the Worker's environment: ``api_key=lambda env: env.MODEL_API_KEY``
is read from the active Turn's ``turn.env`` before each request, never stored or journaled.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx2
from openai import AsyncOpenAI
from openai._base_client import get_platform
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from threadline.environment import Environment
from threadline.pydantic_ai.active_run import active_run
from threadline.pydantic_ai.turn_transport import TurnTransport

#: An API key, or how to read it from the Worker's environment.
ApiKey = str | Callable[[Environment], str]
#: What is sent as the key to a provider that needs none (the SDK insists on one).
NO_KEY = "none"


def openai_client(
    *, base_url: str, api_key: ApiKey | None = None, transport: TurnTransport | None = None
) -> AsyncOpenAI:
    """An ``AsyncOpenAI`` client for the OpenAI-compatible API at ``base_url``
    (``https://api.openai.com/v1``), its requests sent through ``turn.http`` (see the module
    docstring). ``api_key`` is the key, a function of the Turn's ``turn.env`` that returns it,
    or None for a provider that takes none."""
    if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
        raise ValueError("base_url must be an absolute http or https URL")

    async def key() -> str:
        if api_key is None:
            return NO_KEY
        if isinstance(api_key, str):
            return api_key
        run = active_run()
        return str(api_key(run.turn.env if run is not None else Environment()))

    client = AsyncOpenAI(base_url=base_url, api_key=key, max_retries=0,
                         http_client=httpx2.AsyncClient(transport=transport or TurnTransport()))
    # The SDK reads the platform it reports in a thread at its first request: Pyodide has no
    # threads, and under a test's clock the Attempt would seem idle meanwhile. Read it now.
    if getattr(client, "_platform", False) is None:
        client._platform = get_platform()
    return client


def openai_model(
    model_name: str, *, base_url: str, api_key: ApiKey | None = None, **options: Any
) -> OpenAIChatModel:
    """An ``OpenAIChatModel`` named ``model_name`` on :func:`openai_client` (the
    chat-completions API that OpenAI-compatible providers share); ``options`` are the
    model's own (``profile``, ``settings``)."""
    client = openai_client(base_url=base_url, api_key=api_key)
    return OpenAIChatModel(model_name, provider=OpenAIProvider(openai_client=client), **options)


__all__ = ["NO_KEY", "ApiKey", "openai_client", "openai_model"]
