"""`SpendLedger`: what one person's runs spent and hold reserved on one day, exactly once.

Entity style, as Temporal's `message_passing/safe_message_handlers` sample: updates
record (a reservation granted or refused, a settlement, an admin's raise) and answer
at once; they never await, so no two interleave. The main loop alone gives commands:
it tells the runs it refused that there is room (`SPEND_ROOM_SIGNAL`), lets lapsed
reservations go, hands over (continue-as-new) once history grows, waiting for every
handler to finish first, and ends once the day is over and nothing is open.

Exactly once: a call's key is its run's id and the run's count of its reservations
(`Reservation.key`), the same on every try of the activity and on replay. A repeated
reservation is answered as the first was; a repeated settlement counts nothing
(`LedgerState.last_settled`: a run's calls come one after another).

A crash between reserve and settle: the run, resumed on another worker, calls the model
again and settles then. A run that never settles (terminated, reset) holds its
reservation until its lease ends (the call's retry window and a margin): it lapses, and
a settlement that still comes counts in full.
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from tarry.contracts.ledger import (
        LEDGER_WORKFLOW,
        RAISE_UPDATE,
        RESERVE_UPDATE,
        SETTLE_UPDATE,
        SPEND_ROOM_SIGNAL,
        CapRaise,
        LedgerState,
        Reservation,
        ReserveAnswer,
        Settlement,
    )

HAND_OVER_AFTER = 2_000
"""History events after which the ledger continues as new (or sooner, when Temporal
suggests it): a reservation and its settlement are a few events each."""
GRACE = timedelta(hours=1)
"""How long past its day's end a ledger stays open for late settlements."""


@workflow.defn(name=LEDGER_WORKFLOW)
class SpendLedger:
    @workflow.init
    def __init__(self, state: LedgerState) -> None:
        self._s = state
        self._to_wake: list[str] = []

    @workflow.run
    async def run(self, state: LedgerState) -> LedgerState:
        s = self._s
        while True:
            with contextlib.suppress(TimeoutError):  # a lease or the day ended
                await workflow.wait_condition(
                    lambda: bool(self._to_wake) or self._hand_over_due(),
                    timeout=self._next_deadline(),
                )
            self._lapse()
            if self._to_wake:
                woken, self._to_wake = self._to_wake, []
                await asyncio.gather(*(_tell(run_id) for run_id in woken))
            if workflow.now() >= s.day_ends + GRACE and not s.open:
                await workflow.wait_condition(workflow.all_handlers_finished)
                return s
            if self._hand_over_due():
                await workflow.wait_condition(workflow.all_handlers_finished)
                if not self._to_wake:  # else told first, on the next round
                    workflow.continue_as_new(s)

    @workflow.update(name=RESERVE_UPDATE)
    def reserve(self, asked: Reservation) -> ReserveAnswer:
        """Grants `asked` when the day's spent and reserved, with it, stay within the caps
        (those the run carries, or an admin's raise); else records the run as waiting."""
        s = self._s
        caps = asked.caps.raised(s.raised)
        if asked.key in s.open or asked.call <= s.last_settled.get(asked.run_id, 0):
            return self._answer(granted=True)  # a repeat: granted before
        if caps.fits(s.committed() + asked.amount):
            s.open[asked.key] = asked
            s.waiters.pop(asked.run_id, None)
            return self._answer(granted=True)
        s.waiters[asked.run_id] = asked
        spent = s.committed()
        refusal = (
            f"{s.owner}'s daily cap ({caps.describe()}, the day of {s.day} in"
            f" {caps.time_zone}) is reached: ${spent.cost_usd:.4f} and {spent.tokens} tokens"
            f" spent or reserved, and the next call may take ${asked.amount.cost_usd:.4f}"
            f" and {asked.amount.tokens} tokens; an admin raises it (`tarry limits raise"
            f" {s.owner} --cost USD --tokens N`), or it resets when the day ends"
        )
        return self._answer(granted=False, refusal=refusal)

    @workflow.update(name=SETTLE_UPDATE)
    def settle(self, settled: Settlement) -> ReserveAnswer:
        """Replaces the call's reservation with what it used; a repeat counts nothing."""
        s = self._s
        if settled.call > s.last_settled.get(settled.run_id, 0):
            s.open.pop(f"{settled.run_id}/{settled.call}", None)
            s.spent = s.spent + settled.used
            s.last_settled[settled.run_id] = settled.call
            self._wake_fitting()
        return self._answer(granted=True)

    @workflow.update(name=RAISE_UPDATE)
    def raise_cap(self, raised: CapRaise) -> LedgerState:
        """An admin's new caps for the rest of the day; the runs waiting for room ask again."""
        s = self._s
        s.raised = (
            raised
            if s.raised is None
            else s.raised.model_copy(
                update={k: v for k, v in raised.model_dump().items() if v is not None}
            )
        )
        self._to_wake.extend(s.waiters)
        s.waiters.clear()
        return s

    @workflow.query
    def state(self) -> LedgerState:
        return self._s

    def _answer(self, *, granted: bool, refusal: str | None = None) -> ReserveAnswer:
        s = self._s
        return ReserveAnswer(
            granted=granted,
            ledger=workflow.info().workflow_id,
            day_ends=s.day_ends,
            committed=s.committed(),
            refusal=refusal,
        )

    def _wake_fitting(self) -> None:
        """Tells the waiting runs whose calls now fit, as many as fit together, first
        come first: telling them all would have most ask again only to be refused."""
        s = self._s
        room = s.committed()
        for run_id, asked in list(s.waiters.items()):
            if asked.caps.raised(s.raised).fits(room + asked.amount):
                room = room + asked.amount
                self._to_wake.append(run_id)
                del s.waiters[run_id]

    def _lapse(self) -> None:
        """Lets the reservations whose lease ended go (their runs never settled them)."""
        s, now = self._s, workflow.now()
        lapsed = [key for key, r in s.open.items() if r.expires <= now]
        for key in lapsed:
            del s.open[key]
        if lapsed:
            self._wake_fitting()

    def _next_deadline(self) -> timedelta:
        s, now = self._s, workflow.now()
        moments = [r.expires for r in s.open.values()] + [s.day_ends + GRACE]
        return max(timedelta(seconds=1), min(moments) - now)

    def _hand_over_due(self) -> bool:
        info = workflow.info()
        return info.is_continue_as_new_suggested() or info.get_current_history_length() > (
            HAND_OVER_AFTER
        )


async def _tell(run_id: str) -> None:
    """Signals run `run_id` that its call may fit now; a run that ended meanwhile is none
    of the ledger's concern."""
    try:
        await workflow.get_external_workflow_handle(run_id).signal(SPEND_ROOM_SIGNAL)
    except Exception as e:  # the run is gone: nothing waits for the room
        workflow.logger.info("run %s not told of room: %s", run_id, e)
