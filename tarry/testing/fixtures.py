"""The pytest plugin of `tarry.testing`: `pytest_plugins = ["tarry.testing.fixtures"]`
in a test module (or your conftest.py) gives your tests

- `start_agent`: `agent = await start_agent(tools=[...])` starts a `ScriptedAgent`
  (with `ScriptedAgent`'s options) on the session's dev server, in the test's
  `tmp_path`; it stops when the test ends;
- `tarry_temporal`: a client of that dev server, which the session starts once.

They run on pytest-asyncio's session event loop, where the dev server's client lives,
and so must the tests that use them: `pytestmark = pytest.mark.asyncio(loop_scope=
"session")` in the module, or `asyncio_default_test_loop_scope = "session"` in pytest's
configuration. docs/guides/testing.md shows a test of an agent.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from temporalio.client import Client

from tarry.config.settings import TarrySettings
from tarry.temporal.codec import data_converter
from tarry.testing._agent import ScriptedAgent, StartAgent, start_dev_server

__all__ = ["start_agent", "tarry_temporal"]


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def tarry_temporal(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Client]:
    """A client of the Temporal dev server the session starts (`start_dev_server`), with
    Tarry's data converter; every agent of the session runs on it, each on a task queue
    of its own."""
    payloads = tmp_path_factory.mktemp("tarry-payloads")
    converter = data_converter(TarrySettings.model_construct(tarry_storage_dir=payloads))
    async with await start_dev_server(converter) as env:
        yield env.client


@pytest_asyncio.fixture(loop_scope="session")
async def start_agent(tarry_temporal: Client, tmp_path: Path) -> AsyncIterator[StartAgent]:
    """Starts `ScriptedAgent`s on the session's dev server, keeping what they write in
    the test's `tmp_path`, and stops them when the test ends."""
    loop = asyncio.get_running_loop()
    async with AsyncExitStack() as agents:

        async def start(**options: Any) -> ScriptedAgent:
            if asyncio.get_running_loop() is not loop:
                # Its worker would poll on one loop and the test wait on another: the
                # second test of a module hung.
                raise RuntimeError(
                    "start_agent runs on pytest-asyncio's session event loop and this test"
                    " on another: add `pytestmark = pytest.mark.asyncio(loop_scope="
                    '"session")` to the test module, or set `asyncio_default_test_loop_scope'
                    ' = "session"` in pytest\'s configuration'
                )
            options.setdefault("directory", tmp_path)
            return await agents.enter_async_context(ScriptedAgent(tarry_temporal, **options))

        yield start
