"""Waiting for what a run waits for: its phase says only that it waits (`WAITING_USER`),
its `waiting_for` says for what (input, a slot, a model that is down, ...). A test that
means "the run answered" waits for `INPUT`, not for the phase, which a run waiting for
its model's circuit to close is in too."""

from __future__ import annotations

import asyncio

from tarry.client import RunHandle
from tarry.contracts import RunState, WaitingFor
from tests.deadline import TIMEOUT


async def until_waiting_for(
    run: RunHandle,
    waiting_for: WaitingFor,
    timeout: float = TIMEOUT,  # noqa: ASYNC109 - a deadline of the suite's, not a bare wait
) -> RunState:
    """Polls the run's state until it waits for `waiting_for`; a query is the only view."""
    async with asyncio.timeout(timeout):
        while (state := await run.state()).waiting_for is not waiting_for:
            await asyncio.sleep(0.1)
    return state
