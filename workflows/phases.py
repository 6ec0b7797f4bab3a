"""The run's moves between phases, each visible to everyone who follows the run.

Entering a phase sets the search attributes runs are listed by, the details the
Temporal UI shows, a metric, a span for a wait that ended, and for a sub-agent a report
to its parent. Reaching a stop point (`settle`) also answers the replies delivered so
far and the callers owed it (`next_stop`), publishes the stop to the event stream and
sends the notifications wanted.

The main loop moves the run; so do the stages whose call waits for a person
(`workflows.stage`), which is why the moves live here rather than in the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator

from temporalio import workflow

from tarry.contracts import ErrorCode, ErrorInfo, Phase
from tarry.contracts.compatibility import COST_ATTRIBUTE
from workflows import agents, notifications, traces
from workflows.details import count_phase, current_details, search_attributes
from workflows.memory import RunMemory, WorkflowInput
from workflows.stream import RunStream


class Phases:
    """The phase changes of one run (its memory, input and event stream)."""

    def __init__(self, memory: RunMemory, input: WorkflowInput, stream: RunStream) -> None:
        self._m, self._input, self._stream = memory, input, stream
        self.outbox = notifications.Outbox()
        self.reports: list[asyncio.Task[None]] = []
        """A sub-agent's reports to its parent in flight (`agents.report`)."""
        self.indexing: list[asyncio.Task[None]] = []
        """Messages on their way to the search index (`search_index.index_soon`)."""
        self.callers = 0
        """Callers owed the next stop point (`owed`)."""

    def enter(self, phase: Phase) -> None:
        """Moves to `phase`, visibly (see the module's docstring)."""
        m = self._m
        m.phase = phase
        cost = workflow.patched(COST_ATTRIBUTE.id)
        workflow.upsert_search_attributes(search_attributes(m, self._input, cost=cost))
        workflow.set_current_details(current_details(m, self._input))
        count_phase(m)
        traces.entered(m)
        agents.report(m, self.reports)

    def settle(self, phase: Phase) -> None:
        """Moves to a stop point: every reply delivered so far now has its answer."""
        m = self._m
        delivered = m.inbox.queued[0].seq - 1 if m.inbox.queued else m.inbox.received
        m.inbox.answered = m.inbox.received if phase.ended else delivered
        m.stops += 1
        m.requests.pause = False  # any stop point is the pause a caller asked for
        self.enter(phase)
        self._stream.publish_stop(m)
        self.outbox.stop_point(m)

    def wait(self) -> None:
        """A stop point where the run waits for a person (`WaitingUser`)."""
        self.settle(Phase.WAITING_USER)

    def fail(self, error: ErrorInfo) -> None:
        self._m.error = error
        self.settle(Phase.FAILED)

    def abort(self) -> None:
        """Fails the run as its `stop` asked."""
        reason = f": {self._m.requests.stop_reason}" if self._m.requests.stop_reason else ""
        self.fail(ErrorInfo(code=ErrorCode.ENGINE_ABORTED, message=f"stopped by the user{reason}"))

    def follow(self) -> None:
        """While tool calls run: waits for a person as long as a gated call is undecided
        or a sub-agent waits for one (a local one, or a remote one's question), and goes
        back to `Running` once none does."""
        m = self._m
        if m.phase is Phase.RUNNING and (m.agents.waiting or m.agents.asking()):
            self.wait()
        elif (
            m.phase is Phase.WAITING_USER
            and not m.undecided()
            and not m.agents.waiting
            and not m.agents.asking()
            and not m.auth_needed
            and not m.requests.stop
        ):
            self.enter(Phase.RUNNING)

    async def next_stop(self, stops: int) -> None:
        """Waits, as a caller the run owes an answer, for the stop point after `stops`."""
        with self.owed():
            await workflow.wait_condition(lambda: self._m.stops > stops)

    @contextlib.contextmanager
    def owed(self) -> Iterator[None]:
        """Counts a caller (`send`, `decide`, `raise_budget`, `retry`) owed the next stop
        point: the run does not hand over while one waits (`hand_over`)."""
        self.callers += 1
        try:
            yield
        finally:
            self.callers -= 1
