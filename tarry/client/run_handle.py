"""One agent run: `RunHandle` (`tarry.client.starting` starts one).

run = await tarry.start("Summarise notes.md")
state = await run.wait_for({Phase.WAITING_USER})
state = await run.send("Thanks, now write it to summary.md")
async for event in run.events(): ...   # the model's words as it writes them
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncGenerator, Callable, Collection
from contextlib import AbstractAsyncContextManager
from datetime import UTC, timedelta
from typing import Any, Literal

from pydantic import ValidationError
from temporalio.client import (
    Client,
    WorkflowExecutionDescription,
    WorkflowExecutionStatus,
    WorkflowHandle,
)
from temporalio.contrib.workflow_streams import WorkflowStreamClient

from tarry.client.delivery import Delivery, polling_pauses
from tarry.client.starting import start_resumption, start_run, started_by
from tarry.client.stopping import stop_run
from tarry.client.temporal_errors import translated_errors
from tarry.client.timeline import read_timeline
from tarry.contracts import (
    LLM_ACTIVITY,
    Acting,
    BudgetRaise,
    ChatMessage,
    Connected,
    Decision,
    ErrorCode,
    ErrorInfo,
    Fork,
    ModelSwitch,
    PauseRequest,
    Phase,
    PinRequest,
    ReplyPolicy,
    ReplyPolicyChange,
    Retrying,
    RunInput,
    RunResult,
    RunState,
    RunTimeline,
    StopRequest,
    TranscriptAnswer,
    TranscriptPage,
    TranscriptQuery,
    UserInput,
    reply_problem,
)
from tarry.contracts.a2a import A2A_PUSH_SIGNAL, RemoteTask
from tarry.contracts.a2a_configs import (
    DELETE_PUSH_CONFIG_UPDATE,
    PUSH_CONFIGS_QUERY,
    SET_PUSH_CONFIG_UPDATE,
    PushConfig,
    PushConfigRef,
)
from tarry.contracts.events import EVENTS_TOPIC, EventKind, RunEvent
from tarry.core.errors import TarryError
from tarry.core.identities import Caller
from tarry.temporal.pages import PageMissing, PageStore

__all__ = ["RunHandle", "user_input"]


_DEFAULT_LIMIT: int = TranscriptQuery.model_fields["limit"].default
_CODES = frozenset(ErrorCode)


class RunHandle:
    """One agent run, by workflow id (it follows the run across its whole chain); what
    it sends, the run records as done by `caller`."""

    def __init__(
        self,
        client: Client,
        handle: WorkflowHandle[object, RunResult],
        caller: Caller,
        pages: PageStore | None = None,
    ) -> None:
        """`pages`: where the run's older messages are stored (see `Tarry`)."""
        self._client = client
        self._handle = handle
        self._delivery = Delivery(client, handle)
        self.caller = caller
        self._pages = pages if pages is not None else PageStore.of(client.data_converter)

    @property
    def id(self) -> str:
        return self._handle.id

    async def reply(self, text: str, *, id: str | None = None) -> None:
        """Queues a reply, delivered at the next turn boundary (or at once, cutting the
        model call short, for a run that is `interrupt`ed by replies); `RUN_BUSY` from a
        working run that refuses them. It travels as the `reply` update, so the run can
        refuse it; while no worker serves the run nothing works on it, and it waits as
        the `user_input` signal until one does. Retrying with the same `id` never
        delivers it twice."""
        message = user_input(text, id, self.caller)
        try:
            await self._delivery.update("reply", message, id=f"reply-{id}" if id else None)
        except TarryError as e:
            if e.code is not ErrorCode.RUN_NOT_SERVED:
                raise
            async with self._errors():
                await self._handle.signal("user_input", message)

    async def send(self, text: str, *, id: str | None = None) -> RunState:
        """Delivers a reply and waits for the run's next stop point (the `send` update)."""
        message = user_input(text, id, self.caller)
        # The same message id is the same update: the server answers a retry with the
        # first call's outcome instead of running it again.
        return await self._delivery.update("send", message, id=f"send-{id}" if id else None)

    async def approve(
        self,
        call_id: str | None = None,
        *,
        approved: bool = True,
        reason: str | None = None,
        arguments: dict[str, Any] | None = None,
        remember: Literal["run"] | None = None,
    ) -> None:
        """Decides on a gated tool call (all pending calls when `call_id` is None) with the
        `approve` signal. Sent twice, the first decision stands. `remember="run"`: the
        like calls after it are decided the same way without asking (`Decision.remember`)."""
        decision = self._decision(call_id, approved, reason, arguments, remember)
        async with self._errors():
            await self._handle.signal("approve", decision)

    async def decide(
        self,
        call_id: str | None = None,
        *,
        approved: bool = True,
        reason: str | None = None,
        arguments: dict[str, Any] | None = None,
        source: str | None = None,
        remember: Literal["run"] | None = None,
    ) -> RunState:
        """Like `approve`, but checked first (`APPROVAL_*` codes) and answered with the
        state at the run's next stop point (the `decide` update). `source` names the door
        the decision came through (`Decision.source`), kept with it."""
        decision = self._decision(call_id, approved, reason, arguments, remember)
        return await self._delivery.update("decide", decision.model_copy(update={"source": source}))

    def _decision(
        self,
        call_id: str | None,
        approved: bool,
        reason: str | None,
        arguments: dict[str, Any] | None,
        remember: Literal["run"] | None,
    ) -> Decision:
        """A decision by this handle's caller, with their groups for the run's approvers."""
        return Decision(
            call_id=call_id,
            approved=approved,
            reason=reason,
            arguments=arguments,
            remember=remember,
            by=self.caller.user,
            door=self.caller.door,
            groups=list(self.caller.groups),
        )

    async def raise_budget(
        self, *, max_total_tokens: int | None = None, max_cost_usd: float | None = None
    ) -> RunState:
        """Replaces the budget limits given (the `raise_budget` update). A run paused on
        its budget goes on, and the answer is the state at its next stop point; otherwise
        the state at once. `BUDGET_INVALID` when none is given or one is not above what
        the run has spent; `BUDGET_NOT_ALLOWED` for one above the caller's
        `max_run_budget` (`[limits]`), whoever's run it is."""
        try:
            raised = BudgetRaise(
                max_total_tokens=max_total_tokens,
                max_cost_usd=max_cost_usd,
                by=self.caller.user,
                door=self.caller.door,
            )
        except ValidationError as e:
            reason = str(e.errors()[0]["msg"])
            raise TarryError(ErrorCode.BUDGET_INVALID, f"a budget limit {reason}") from None
        limits = self.caller.limits
        if limits and (problem := limits.budget_problem(raised, "the raise asks for a budget")):
            raise problem
        return await self._delivery.update("raise_budget", raised)

    async def retry(self) -> RunState:
        """Asks the model again, for a run waiting because it kept failing (`waiting_for:
        "model"`); the state at the run's next stop point. `RETRY_NOT_WAITING` for a run
        that waits for something else."""
        return await self._delivery.update("retry", self._acting())

    async def set_model(self, profile: str) -> RunState:
        """Switches the run's next model calls to the worker's profile `profile` (the
        `set_model` update); the state at once. A run waiting for a failing model goes
        on with `retry` or a reply. The run refuses a profile outside the caller's limits
        (`MODEL_NOT_ALLOWED`), whose globs the switch carries."""
        limits = self.caller.limits
        models = None if limits is None or limits.models is None else list(limits.models)
        switch = ModelSwitch(
            profile=profile, by=self.caller.user, door=self.caller.door, models=models
        )
        return await self._delivery.update("set_model", switch)

    async def set_reply_policy(self, policy: ReplyPolicy) -> RunState:
        """What a reply does from now on that arrives while the agent works (the
        `set_reply_policy` update); the state at once."""
        change = ReplyPolicyChange(policy=policy, by=self.caller.user, door=self.caller.door)
        return await self._delivery.update("set_reply_policy", change)

    async def pin(self, index: int) -> RunState:
        """Keeps transcript message `index` in the model's window from the next call on,
        across pages and hand-overs (the `pin` update); the state at once. A message the
        run has moved into a page is read from the store and sent with the pin. The run
        refuses `PIN_UNKNOWN_MESSAGE`, `PIN_INVALID` (a tool's result) and
        `PINS_OVER_BUDGET` (its pins alone would be more than its context budget)."""
        answer = await self._transcript(index, 1)
        stored = bool(answer.stored) or answer.index is not None
        message = (await self._messages_of(answer, enough=1))[0] if stored else None
        request = PinRequest(
            index=index, message=message, by=self.caller.user, door=self.caller.door
        )
        return await self._delivery.update("pin", request)

    async def unpin(self, index: int) -> RunState:
        """Lets message `index` leave the model's window as the others do (the `unpin`
        update); `PIN_UNKNOWN_MESSAGE` when it is not pinned."""
        request = PinRequest(index=index, by=self.caller.user, door=self.caller.door)
        return await self._delivery.update("unpin", request)

    async def pause(self) -> None:
        """Asks the run to wait for a person at its next turn boundary (the `pause`
        signal); a reply then goes on as usual."""
        async with self._errors():
            await self._handle.signal("pause", PauseRequest(**self._acting().model_dump()))

    async def stop(self, reason: str | None = None) -> None:
        """Ends the run (the `stop` signal): a waiting run completes, a working one is
        aborted; `reason` is kept in its state and result. `resume` goes on with it. A
        run whose workflow task keeps failing cannot read the signal: it is terminated
        after `STOP_GRACE`, naming who stopped it (`tarry.client.stopping`)."""
        request = StopRequest(reason=reason, **self._acting().model_dump())
        await stop_run(self._client, self._handle, request)

    async def connected(self, server: str, person: str) -> None:
        """Tells the run that `person` connected their account to `server` (the
        `connected` signal, the API's OAuth callback's): the calls that waited run."""
        signal = Connected(server=server, person=person, **self._acting().model_dump())
        async with self._errors():
            await self._handle.signal("connected", signal)

    async def remote_news(self, news: RemoteTask) -> None:
        """Tells the run of news of its remote A2A agent's task (the `a2a_push` signal,
        the API's push route's): the call waiting for it acts on it."""
        async with self._errors():
            await self._handle.signal(A2A_PUSH_SIGNAL, news)

    async def set_push_config(self, config: PushConfig) -> None:
        """Has the run push its A2A task's news to `config` at its stop points (the
        `set_push_config` update); replaces `config.owner`'s config of the same id."""
        await self._delivery.update(SET_PUSH_CONFIG_UPDATE, config, self._acting())

    async def delete_push_config(self, owner: str, id: str) -> None:
        """Drops `owner`'s push config `id` (the `delete_push_config` update)."""
        ref = PushConfigRef(id=id, owner=owner)
        await self._delivery.update(DELETE_PUSH_CONFIG_UPDATE, ref, self._acting())

    async def push_configs(self) -> list[PushConfig]:
        """The push configs the run's clients set, their tokens sealed."""
        return await self._delivery.query(PUSH_CONFIGS_QUERY, list[PushConfig])

    def _acting(self) -> Acting:
        """Who sends what carries nothing else: this handle's caller, and their door."""
        return Acting(by=self.caller.user, door=self.caller.door)

    async def state(self) -> RunState:
        """The run's `state` query, with the call being retried when it is `Running`
        (`retrying`, from Temporal). Raises `RUN_NOT_SERVED` within `QUERY_PATIENCE`
        when no worker polls the run's task queue, since only a worker can answer a query."""
        state = await self._state()
        if state.phase is Phase.RUNNING:
            state.retrying = await self.retrying()
        return state

    async def retrying(self) -> Retrying | None:
        """The model or tool call that failed and waits for its next attempt, if any:
        Temporal's pending activity, which the run itself cannot see."""
        description = await self.describe()
        for pending in description.raw_description.pending_activities:
            if pending.attempt < 2 or not pending.HasField("last_failure"):
                continue
            model = pending.activity_type.name == LLM_ACTIVITY
            failure = pending.last_failure
            code = failure.application_failure_info.type
            default = ErrorCode.LLM_HTTP_ERROR if model else ErrorCode.TOOL_FAILED
            scheduled = pending.HasField("next_attempt_schedule_time")
            return Retrying(
                call="model" if model else pending.activity_type.name,
                attempt=pending.attempt,
                last_error=ErrorInfo(
                    code=ErrorCode(code) if code in _CODES else default, message=failure.message
                ),
                next_attempt_at=pending.next_attempt_schedule_time.ToDatetime(UTC)
                if scheduled
                else None,
            )
        return None

    async def _state(self) -> RunState:
        """The `state` query alone: what polling needs."""
        return await self._delivery.query("state", RunState)

    async def describe(self) -> WorkflowExecutionDescription:
        """What Temporal itself records of the run (status, task queue, search attributes
        such as `TarryPhase`): known without a worker, unlike `state`."""
        return await self._delivery.describe()

    async def transcript(self, start: int = 0) -> list[ChatMessage]:
        """The transcript from `start`, read page by page (each page a `transcript`
        query small enough for the `temporal` CLI and the Web UI to show as text, or
        the references of the older messages a long run keeps in the payload store)."""
        messages: list[ChatMessage] = []
        next_start: int | None = start
        while next_start is not None:
            answer = await self._transcript(next_start, _DEFAULT_LIMIT)
            messages += await self._messages_of(answer)
            next_start = answer.next_start
        return messages

    async def transcript_page(self, start: int = 0, limit: int = _DEFAULT_LIMIT) -> TranscriptPage:
        """One page of the transcript: up to `limit` messages from `start`, fewer when
        they pass `TRANSCRIPT_PAGE_BYTES` (the `transcript` query; messages a long run
        moved into the payload store are read from there)."""
        answer = await self._transcript(start, limit)
        messages = await self._messages_of(answer, enough=limit)
        return TranscriptPage.of(messages, start, answer.total, limit)

    async def _transcript(self, start: int, limit: int) -> TranscriptAnswer:
        query = TranscriptQuery(start=start, limit=limit)
        return await self._delivery.query("transcript", TranscriptAnswer, query)

    async def _messages_of(
        self, answer: TranscriptAnswer, enough: int | None = None
    ) -> list[ChatMessage]:
        """The answer's messages from its `start`: in it, or in the pages it names or its
        index names (no more of those than hold `enough` messages)."""
        if not answer.stored and answer.index is None:
            return answer.messages
        if self._pages is None:
            raise TarryError(
                ErrorCode.PAYLOAD_MISSING,
                f"run {self.id!r} keeps its older messages in the payload store, and this "
                "client has none: connect with `Tarry.connect(settings)`, or pass `pages`",
            )
        messages: list[ChatMessage] = []
        try:
            refs = answer.stored
            if answer.index is not None:  # pages older than those the run keeps references of
                refs = await self._pages.pages_from(answer.index, answer.start)
            for ref in refs:
                page = await self._pages.read(ref)
                messages += page[max(0, answer.start - ref.start) :]
                if enough is not None and len(messages) >= enough:
                    break
        except PageMissing as e:
            raise TarryError(ErrorCode.PAYLOAD_MISSING, str(e)) from e
        return messages

    async def wait_for(
        self,
        phases: Collection[Phase],
        timeout: float | timedelta = 60.0,  # noqa: ASYNC109 - the public contract names it
    ) -> RunState:
        """Polls `state` until the run is in one of `phases`, every 50 ms at first and less
        often as the wait goes on (`tarry.client.delivery.polling_pauses`); raises TimeoutError. A
        run no worker serves for a while (`RUN_NOT_SERVED`) is waited for as well: a worker
        being restarted is back within the timeout."""
        seconds = timeout.total_seconds() if isinstance(timeout, timedelta) else timeout
        pauses = polling_pauses()  # a query is the only view of a phase, and costs no history
        async with asyncio.timeout(seconds):
            while True:
                state = await self.served_state(retrying=False)
                if state is not None and state.phase in phases:
                    return state
                await asyncio.sleep(next(pauses))

    async def served_state(self, *, retrying: bool = True) -> RunState | None:
        """The run's state (without `retrying` unless asked); None while no worker
        serves it (one may come later)."""
        try:
            return await (self.state() if retrying else self._state())
        except TarryError as e:
            if e.code is not ErrorCode.RUN_NOT_SERVED:
                raise
            return None

    async def events(self, from_offset: int = 0) -> AsyncGenerator[RunEvent]:
        """The run's live events (see `tarry.contracts.events`): the model's words as it writes
        them, each transcript message, each stop point. From `from_offset` in the run's
        stream (a `RunState.events` continues from that state; 0 starts at the oldest
        event the run still holds: those since its last continue-as-new, which hands on
        the last turn's). Ends once the run has ended and its last events are read;
        follows continue-as-new.

        Each wait for new events is an update, which the run's history records; the
        iterator asks again at most every 100 ms. Messages come in order, none missing:
        where a hand-over dropped events this observer had not read yet, the missing
        messages are read from the transcript (the words of their turn are not)."""
        stream = WorkflowStreamClient.create(self._client, self.id)
        next_message: int | None = None
        async with self._errors():
            async for item in stream.subscribe(EVENTS_TOPIC, from_offset, result_type=RunEvent):
                event = item.data.model_copy(update={"offset": item.offset})
                if event.kind is EventKind.MESSAGE and event.index is not None:
                    if next_message is not None and event.index > next_message:
                        for missed in await self._messages(next_message, event.index):
                            yield missed
                    next_message = max(next_message or 0, event.index + 1)
                yield event

    async def _messages(self, start: int, end: int) -> list[RunEvent]:
        """Transcript messages `start` to `end` (exclusive) as `message` events."""
        messages = (await self.transcript(start))[: end - start]
        return [
            RunEvent(kind=EventKind.MESSAGE, index=index, message=message)
            for index, message in enumerate(messages, start=start)
        ]

    async def timeline(self) -> RunTimeline:
        """Where the run's time went: its model calls, tool calls, waits for people and
        sub-agents on one time axis, read from its history (`tarry.client.timeline`)."""
        return await read_timeline(self._client, self.id)

    async def result(self) -> RunResult:
        """Waits for the run to end and returns how it ended, following continue-as-new."""
        async with self._errors():
            return await self._handle.result()

    async def fork(
        self,
        at: int,
        text: str | None = None,
        *,
        run_id: str | None = None,
        admit: Callable[[RunInput], None] | None = None,
    ) -> RunHandle:
        """Starts a new run that branches off this one at message `at` (a user message,
        counted from 0 as in `transcript()`): this run's input, its conversation before
        that message, and then the message again, or `text` in its place. This run is
        untouched and goes on; open and ended runs both fork. `run_id` defaults to
        `<this id>-fork-<short uuid>`. Raises `FORK_POINT_INVALID` when message `at` is
        not a user message; `admit` may refuse this run's input for the fork's starter
        (a server's rules: a memory scope not theirs) by raising."""
        if text is not None:
            text = user_input(text, None, self.caller).text
        transcript = await self.transcript()
        if not 0 <= at < len(transcript) or transcript[at].role != "user":
            users = [i for i, message in enumerate(transcript) if message.role == "user"]
            where = (
                f"run {self.id!r} has {len(transcript)} messages (0 to {len(transcript) - 1}),"
                f" none numbered {at}"
                if not 0 <= at < len(transcript)
                else f"message {at} of run {self.id!r} is not a user message"
            )
            raise TarryError(
                ErrorCode.FORK_POINT_INVALID,
                f"{where}; a fork starts at one of its user messages:"
                f" {', '.join(map(str, users)) or 'none yet'}",
            )
        input = await self._delivery.query("run_input", RunInput)
        if admit is not None:
            admit(input)
        prompt = text if text is not None else transcript[at].content or ""
        fork = Fork(run_id=self.id, at=at, transcript=transcript[:at])
        queue = (await self.describe()).task_queue
        fork_id = run_id or f"{self.id[:180]}-fork-{uuid.uuid4().hex[:6]}"
        input = input.model_copy(update={"prompt": prompt, **started_by(self.caller)})
        handle = await start_run(self._client, queue, self.caller, input, run_id=fork_id, fork=fork)
        return RunHandle(self._client, handle, self.caller, self._pages)

    async def resume(self) -> RunHandle:
        """Goes on with an ended run (failed by a model error once its retries were
        spent, or stopped): starts a run under the same id with its whole memory,
        waiting for a reply, with the error that ended it as its `warning` and `error`
        until then. Raises `RUN_NOT_ENDED` for a run that is still going."""
        description = await self.describe()
        if description.status is WorkflowExecutionStatus.RUNNING:
            raise TarryError(
                ErrorCode.RUN_NOT_ENDED, f"run {self.id!r} has not ended: reply to it instead"
            )
        await self._delivery.require_worker(even_ended=True)
        handle = await start_resumption(self._client, self._handle, description, self._acting())
        return RunHandle(self._client, handle, self.caller, self._pages)

    def _errors(self) -> AbstractAsyncContextManager[None]:
        return translated_errors(self.id)


def user_input(text: str, id: str | None, caller: Caller) -> UserInput:
    """The reply of `caller` as it travels; refused here, before it travels, when it is not UTF-8,
    empty or over `MAX_INPUT_BYTES` (`reply_problem`, the check the run makes too)."""
    try:
        message = UserInput(text=text, id=id, by=caller.user, door=caller.door)
    except ValidationError as e:
        reason = str(e.errors()[0]["msg"]).removeprefix("Value error, ")
        raise TarryError(ErrorCode.INPUT_INVALID, reason) from None
    if problem := reply_problem(text):
        raise TarryError(*problem)
    return message
