"""Daily caps: every model call of a run whose owner has one is reserved on the owner's
ledger of the day before it is made, and settled with what it used after
(`workflows.ledger`, `activities.ledger`).

At the cap the run does not call the model: it waits (`waiting_for: budget`, its error
`SPEND_CAP_REACHED` naming whose cap) inside the turn, and asks again when the ledger
says there is room (an admin raised the cap, another run settled for less than it
reserved) or when the day ends (a timer, in the caps' time zone). A stop ends the wait.

A run without caps (`WorkflowInput.spend` null: no `[limits]`, or none for its owner)
gives no command here, so its history is exactly that of a run from before the ledger.
"""

from __future__ import annotations

import contextlib
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy

from tarry.contracts import ErrorCode, ErrorInfo, LlmResponse, Phase
from tarry.contracts.ledger import (
    RESERVE_ACTIVITY,
    SETTLE_ACTIVITY,
    SPEND_ROOM_SIGNAL,
    ReserveAnswer,
    ReserveRequest,
    Settlement,
    Spend,
)
from workflows.memory_groups import SpendMark
from workflows.stage import AskModel, ModelOutcome, RunScope, Stage

LEDGER_CALL = timedelta(seconds=30)
LEDGER_RETRY = RetryPolicy(
    initial_interval=timedelta(milliseconds=200), maximum_interval=timedelta(seconds=2)
)
"""A ledger not reachable is asked again for as long as it takes: the run waits."""
LEASE_MARGIN = timedelta(minutes=5)


class SpendCap(Stage):
    """The ledger's stage: reserve, call, settle."""

    async def around_model(self, run: RunScope, ask: AskModel) -> ModelOutcome:
        caps = run.input.spend
        if caps is None:
            return await ask()
        m = run.memory
        mark = m.spend = m.spend or SpendMark()
        mark.calls += 1
        request = ReserveRequest(
            caps=caps,
            run_id=workflow.info().workflow_id,
            call=mark.calls,
            profile=m.requests.model or run.input.model,
            max_tokens=run.input.sampling.max_tokens if run.input.sampling else None,
            prompt_tokens=mark.last_tokens,
            lease=run.input.timeouts.llm_retry_window + LEASE_MARGIN,
        )
        granted = await _reserved(run, request)
        if granted is None:
            return None  # stopped while it waited
        outcome = await ask()
        used = spent_by(outcome)
        mark.last_tokens = used.tokens or mark.last_tokens
        if mark.unsettled is not None:  # the embeddings since the last call, with this one
            used, mark.unsettled = used + mark.unsettled, None
        await settle(granted, request, used)
        return outcome


async def reserve(request: ReserveRequest) -> ReserveAnswer:
    """The ledger's answer to `request` (an eval's points ask once, a run again while
    refused: `_reserved`)."""
    answer: ReserveAnswer = await workflow.execute_activity(
        RESERVE_ACTIVITY,
        request,
        result_type=ReserveAnswer,
        start_to_close_timeout=LEDGER_CALL,
        retry_policy=LEDGER_RETRY,
        summary=f"reserve call {request.call}",
    )
    return answer


async def settle(granted: ReserveAnswer, request: ReserveRequest, used: Spend) -> None:
    """The call of `request`, granted, settled on its ledger with what it `used`."""
    settled = Settlement(ledger=granted.ledger, run_id=request.run_id, call=request.call, used=used)
    await workflow.execute_activity(
        SETTLE_ACTIVITY,
        settled,
        start_to_close_timeout=LEDGER_CALL,
        retry_policy=LEDGER_RETRY,
        summary=f"settle call {request.call}",
    )


def spent_by(outcome: ModelOutcome) -> Spend:
    """What a model call used: nothing for one that failed or was cut short."""
    usage = outcome.usage if isinstance(outcome, LlmResponse) else None
    return Spend(tokens=usage.total_tokens, cost_usd=usage.cost_usd) if usage else Spend()


async def _reserved(run: RunScope, request: ReserveRequest) -> ReserveAnswer | None:
    """The granted reservation, asked again while the cap is reached (the run waits for
    a person meanwhile); None when a stop ends the wait."""
    m = run.memory
    mark = m.spend
    assert mark is not None
    while True:
        mark.room = False
        answer = await reserve(request)
        if answer.granted:
            if mark.capped is not None:
                if m.error is mark.capped:
                    m.error = None
                mark.capped = None
                if m.warning is ErrorCode.SPEND_CAP_REACHED:
                    m.warning = None
                if m.phase is Phase.WAITING_USER:
                    run.phases.enter(Phase.RUNNING)
            return answer
        first = mark.capped is None
        mark.capped = ErrorInfo(code=ErrorCode.SPEND_CAP_REACHED, message=answer.refusal or "")
        m.warning, m.error = ErrorCode.SPEND_CAP_REACHED, mark.capped
        if first:
            run.phases.wait()
        with contextlib.suppress(TimeoutError):  # past it, a new day: its ledger has room
            await workflow.wait_condition(
                lambda: mark.room or m.requests.stop,
                timeout=max(timedelta(seconds=1), answer.day_ends - workflow.now()),
            )
        request.asking += 1
        if m.requests.stop:
            if m.error is mark.capped:
                m.error = None
            mark.capped = None
            return None


SPEND = SpendCap()


def install(run: RunScope) -> None:
    """Registers the spend-room signal: the owner's ledger may have room for the call
    this run waits to make, so it asks again."""

    def spend_room() -> None:
        if run.memory.spend is not None:
            run.memory.spend.room = True

    workflow.set_signal_handler(SPEND_ROOM_SIGNAL, spend_room)
