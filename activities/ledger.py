"""The run's side of the spend ledger (`workflows.ledger`): a reservation priced from
the worker's profile and sent to the owner's ledger of the day, and its settlement.

A workflow cannot send another workflow an update, so these activities do: the
reservation with update-with-start (the first call of an owner's day starts that day's
ledger), both with the call's key as the update's id. Temporal answers a repeated id
with the first answer while the ledger's run holds it; the ledger itself counts a key
once across its hand-overs (`LedgerState.last_settled`).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from typing import TypeVar

from temporalio import activity
from temporalio.service import RPCError, RPCStatusCode

from tarry.config.tables import ANTHROPIC_MAX_TOKENS, ModelProfile
from tarry.contracts import Usage
from tarry.contracts.ledger import (
    RESERVE_ACTIVITY,
    RESERVE_UPDATE,
    SETTLE_ACTIVITY,
    SETTLE_UPDATE,
    Reservation,
    ReserveAnswer,
    ReserveRequest,
    Settlement,
    Spend,
    day_of,
    ledger_id,
)
from tarry.temporal.ledger import ledger_start

__all__ = ["SpendBook"]

T = TypeVar("T")
BUSY = frozenset({RPCStatusCode.RESOURCE_EXHAUSTED, RPCStatusCode.UNAVAILABLE})
"""The server's refusals of an update while the ledger has others in flight."""


class SpendBook:
    """Prices reservations with the worker's model profiles, and keeps the ledgers."""

    def __init__(self, profiles: Mapping[str, ModelProfile]) -> None:
        self._profiles = dict(profiles)

    def estimate(self, asked: ReserveRequest) -> Usage:
        """The most the call may use: its input as estimated, and its `max_tokens` (the
        run's, else the profile's, else the length Anthropic is asked for)."""
        profile = self._profiles.get(asked.profile)
        most = asked.max_tokens or (profile and profile.max_tokens) or ANTHROPIC_MAX_TOKENS
        usage = Usage(
            prompt_tokens=asked.prompt_tokens,
            completion_tokens=most,
            total_tokens=asked.prompt_tokens + most,
        )
        if profile is not None and profile.prices is not None:
            usage.cost_usd = profile.prices.cost_of(usage)
        return usage

    @activity.defn(name=RESERVE_ACTIVITY)
    async def reserve_spend(self, asked: ReserveRequest) -> ReserveAnswer:
        info = activity.info()
        now = datetime.now(UTC)
        owner = asked.caps.owner
        estimate = self.estimate(asked)
        reservation = Reservation(
            run_id=asked.run_id,
            call=asked.call,
            caps=asked.caps,
            amount=Spend(tokens=estimate.total_tokens, cost_usd=estimate.cost_usd),
            expires=now + asked.lease,
        )
        client = activity.client()
        update_id = f"reserve-{reservation.key}-{asked.asking}"
        ledger = client.get_workflow_handle(ledger_id(owner, day_of(asked.caps.time_zone, now)[0]))
        try:
            answer: ReserveAnswer = await _patiently(
                lambda: ledger.execute_update(
                    RESERVE_UPDATE, reservation, id=update_id, result_type=ReserveAnswer
                )
            )
        except RPCError as e:
            if e.status is not RPCStatusCode.NOT_FOUND:
                raise
            # The owner's first call of the day: it starts the day's ledger.
            start = ledger_start(owner, asked.caps.time_zone, info.task_queue, now)
            answer = await client.execute_update_with_start_workflow(
                RESERVE_UPDATE,
                reservation,
                start_workflow_operation=start,
                id=update_id,
                result_type=ReserveAnswer,
            )
        return answer

    @activity.defn(name=SETTLE_ACTIVITY)
    async def settle_spend(self, settled: Settlement) -> None:
        ledger = activity.client().get_workflow_handle(settled.ledger)
        try:
            key = f"settle-{settled.run_id}/{settled.call}"
            await _patiently(lambda: ledger.execute_update(SETTLE_UPDATE, settled, id=key))
        except RPCError as e:
            if e.status is not RPCStatusCode.NOT_FOUND:
                raise
            # The day's ledger has ended (its day and grace over, the reservation lapsed):
            # nothing is open there to settle.
            activity.logger.warning("ledger %s has ended: %s", settled.ledger, e.message)


async def _patiently(send: Callable[[], Awaitable[T]]) -> T:
    """`send()`, sent again after a short, random pause while the server refuses it for
    the ledger's updates in flight (Temporal allows a workflow ten at once): fifty runs of
    one owner calling at once queue here rather than in the activities' slower retries."""
    while True:
        try:
            return await send()
        except RPCError as e:
            if e.status not in BUSY:
                raise
        activity.heartbeat()
        await asyncio.sleep(random.uniform(0.01, 0.1))
