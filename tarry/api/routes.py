"""`/v1/runs`: start runs, find them, read them, answer them and follow them live,
each route a thin layer over `tarry.client`."""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
from collections.abc import AsyncIterator
from http import HTTPStatus
from typing import Annotated

from fastapi import APIRouter, Header, Query, Response
from sse_starlette import EventSourceResponse, ServerSentEvent

from tarry.api.errors import ApiError, ErrorBody
from tarry.api.feeds import Feeds
from tarry.api.models import (
    Accepted,
    MessageRequest,
    RunList,
    RunSummary,
    RunView,
    Started,
    StartRequest,
)
from tarry.client import RunHandle, Tarry, TarryError
from tarry.contracts import (
    Budget,
    Decision,
    ErrorCode,
    Phase,
    RunInput,
    RunState,
    StopRequest,
    TranscriptPage,
    WaitingFor,
)
from tarry.runs import find_runs

__all__ = ["runs_router"]

IdempotencyKey = Annotated[
    str | None,
    Header(
        description="A retried request with the same key is the same request: a start"
        " returns the run the first one started; a message enters the transcript once."
    ),
]

_ERRORS: dict[int | str, dict[str, object]] = {
    status: {"model": ErrorBody} for status in (401, 404, 409, 413, 422, 503)
}


def idempotent_run_id(key: str) -> str:
    """The run id a start with Idempotency-Key `key` and no id gets: the same for every
    retry, so Temporal itself knows the run (no table here that a restart would lose)."""
    return f"run-{hashlib.sha256(key.encode()).hexdigest()[:16]}"


async def existing(tarry: Tarry, run_id: str) -> RunHandle | None:
    run = tarry.get(run_id)
    try:
        await run.describe()
    except TarryError as e:
        if e.code is not ErrorCode.RUN_NOT_FOUND:
            raise
        return None
    return run


def _page_token(cursor: str | None) -> bytes | None:
    if cursor is None:
        return None
    try:
        return base64.urlsafe_b64decode(cursor.encode())
    except (binascii.Error, ValueError):
        raise TarryError(
            ErrorCode.INPUT_INVALID, "cursor: not a cursor this API gave (next_cursor)"
        ) from None


def resume_offset(after: int | None, last_event_id: str | None) -> int:
    """Where an event stream starts: after `?after=` or the `Last-Event-ID` a browser
    sends when it reconnects (the offset of the last event it received), else at the
    oldest event the run holds."""
    if after is None and last_event_id is not None:
        if not last_event_id.strip().isdigit():
            raise TarryError(ErrorCode.INPUT_INVALID, "Last-Event-ID: not an event id (an offset)")
        after = int(last_event_id)
    return 0 if after is None else after + 1


def runs_router(tarry: Tarry, feeds: Feeds) -> APIRouter:
    router = APIRouter(prefix="/v1/runs", tags=["runs"], responses=_ERRORS)

    @router.post("", status_code=HTTPStatus.CREATED)
    async def start_run(body: StartRequest, idempotency_key: IdempotencyKey = None) -> Started:
        """Start a run. With an Idempotency-Key, a retry returns the run the first
        request started (its id comes from the key, unless `id` is given)."""
        run_id = body.id or (idempotent_run_id(idempotency_key) if idempotency_key else None)
        input = RunInput.model_validate(body.model_dump(exclude={"id"}))
        if idempotency_key and run_id and (run := await existing(tarry, run_id)):
            return Started(id=run.id, state=await run.served_state())
        try:
            run = await tarry.start(input, run_id=run_id)
        except TarryError as e:
            if e.code is not ErrorCode.RUN_EXISTS or not idempotency_key or run_id is None:
                raise
            run = tarry.get(run_id)  # the first of two concurrent retries started it
        return Started(id=run.id, state=await run.served_state())

    @router.get("")
    async def list_runs(
        phase: Phase | None = None,
        waiting_for: WaitingFor | None = None,
        limit: Annotated[int, Query(ge=1, le=1000)] = 20,
        cursor: str | None = None,
    ) -> RunList:
        """Runs as Temporal's visibility records them (no worker needed), open runs
        first, newest first, a page of `limit` at a time."""
        page = await find_runs(
            tarry.client,
            phase=phase,
            waiting_for=waiting_for,
            limit=limit,
            page_token=_page_token(cursor),
        )
        token = page.next_page_token
        return RunList(
            runs=[RunSummary.of(row) for row in page.rows],
            next_cursor=base64.urlsafe_b64encode(token).decode() if token else None,
        )

    @router.get("/{run_id}")
    async def get_run(run_id: str) -> RunView:
        """The run's state (its `state` query)."""
        state = await tarry.get(run_id).state()
        return RunView(id=run_id, **state.model_dump())

    @router.get("/{run_id}/transcript")
    async def get_transcript(
        run_id: str,
        start: Annotated[int, Query(ge=0)] = 0,
        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    ) -> TranscriptPage:
        """Up to `limit` messages from `start`: fewer when they pass 128 KiB; the next
        page starts at `start` plus the messages given, until `total`."""
        return await tarry.get(run_id).transcript_page(start, limit)

    @router.post(
        "/{run_id}/messages",
        status_code=HTTPStatus.ACCEPTED,
        responses={HTTPStatus.OK: {"model": RunState, "description": "with ?wait=true"}},
    )
    async def post_message(
        run_id: str,
        body: MessageRequest,
        response: Response,
        wait: bool = False,
        idempotency_key: IdempotencyKey = None,
    ) -> Accepted | RunView:
        """Reply to the run. The Idempotency-Key is the message's id: a retry enters
        the transcript once. With `?wait=true`, answers 200 with the state at the run's
        next stop point instead of 202 at once."""
        run = tarry.get(run_id)
        if not wait:
            await run.reply(body.text, id=idempotency_key)
            return Accepted()
        state = await run.send(body.text, id=idempotency_key)
        response.status_code = HTTPStatus.OK
        return RunView(id=run_id, **state.model_dump())

    @router.post("/{run_id}/approvals")
    async def decide(run_id: str, body: Decision) -> RunView:
        """Decide on a gated tool call (every pending one when `call_id` is null):
        the state at the run's next stop point, or 409 with an `APPROVAL_*` code when
        the decision cannot apply (nothing pending, an unknown or decided call)."""
        state = await tarry.get(run_id).decide(
            body.call_id, approved=body.approved, reason=body.reason, arguments=body.arguments
        )
        return RunView(id=run_id, **state.model_dump())

    @router.post("/{run_id}/budget")
    async def raise_budget(run_id: str, body: Budget) -> RunView:
        """Raise the run's budget (the limits given replace its own): a run waiting for
        it goes on and the answer is the state at its next stop point, else the state
        at once; 422 `BUDGET_INVALID` for a limit not above what the run has spent."""
        state = await tarry.get(run_id).raise_budget(
            max_total_tokens=body.max_total_tokens, max_cost_usd=body.max_cost_usd
        )
        return RunView(id=run_id, **state.model_dump())

    @router.post("/{run_id}/pause", status_code=HTTPStatus.ACCEPTED)
    async def pause(run_id: str) -> Accepted:
        """Ask the run to wait for a person at its next turn boundary."""
        await tarry.get(run_id).pause()
        return Accepted()

    @router.post("/{run_id}/stop", status_code=HTTPStatus.ACCEPTED)
    async def stop(run_id: str, body: StopRequest | None = None) -> Accepted:
        """End the run: a waiting run completes, a working one is aborted."""
        await tarry.get(run_id).stop(body.reason if body else None)
        return Accepted()

    @router.get(
        "/{run_id}/events",
        response_class=EventSourceResponse,
        responses={HTTPStatus.OK: {"content": {"text/event-stream": {}}}},
    )
    async def events(
        run_id: str,
        after: Annotated[int | None, Query(ge=-1)] = None,
        last_event_id: Annotated[str | None, Header()] = None,
    ) -> EventSourceResponse:
        """The run's events as server-sent events: `id:` the offset in the run's
        stream, `event:` the kind, `data:` the `RunEvent` JSON. Resumes after
        `Last-Event-ID` or `?after=`; follows continue-as-new; ends after the run ends."""
        start = resume_offset(after, last_event_id)
        await tarry.get(run_id).describe()  # a 404 is an answer, not an empty stream
        return EventSourceResponse(_sse(feeds, run_id, start))

    return router


async def _sse(feeds: Feeds, run_id: str, start: int) -> AsyncIterator[ServerSentEvent]:
    events = feeds.events(run_id, start)
    try:
        # Closed here, not when collected: a stream a browser left stops its feed now.
        async with contextlib.aclosing(events):
            async for event in events:
                yield ServerSentEvent(
                    data=event.model_dump_json(exclude_none=True),
                    event=event.kind,
                    # A message recovered from the transcript has no offset; without an
                    # id, a browser resumes after the event before it, still right.
                    id=None if event.offset is None else str(event.offset),
                )
    except TarryError as e:  # the stream has begun: its last event says why it ends
        error = ErrorBody(error=ApiError(code=e.code, message=e.message))
        yield ServerSentEvent(data=error.model_dump_json(), event="error")
