"""`/v1/runs`: start runs, find them, read them, answer them and follow them live,
each route a thin layer over `tarry.client`.

The routes are this module's `router`'s. Each takes the app's client as its caller's
(`ActingOf`), so what it does the runs record as theirs; `CallerOf` is the same caller,
for the rights and views that name them."""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import functools
import logging
from collections.abc import AsyncIterator
from http import HTTPStatus
from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, Depends, Header, Query, Request, Response
from sse_starlette import EventSourceResponse, ServerSentEvent
from temporalio.service import RPCError

from tarry.api.access import BODY_REQUIRED, JSON_ONLY
from tarry.api.auth import ActingOf, CallerOf
from tarry.api.errors import (
    AUTH,
    INTERNAL,
    INTERNAL_MESSAGE,
    READ,
    STARTS,
    WRITE,
    ApiError,
    ErrorBody,
    error_answers,
)
from tarry.api.feeds import Feeds
from tarry.api.keyed_starts import (
    IDEMPOTENCY_MEMO,
    idempotent_run_id,
    retried_start,
    start_request,
)
from tarry.api.models import (
    Accepted,
    BudgetRequest,
    DecisionRequest,
    EmptyRequest,
    ForkRequest,
    MessageRequest,
    ModelRequest,
    PinBody,
    ReplyPolicyRequest,
    RunId,
    RunList,
    RunSummary,
    RunView,
    ScheduleName,
    Started,
    StartRequest,
    StateView,
    StopBody,
)
from tarry.api.parts import FeedsOf, PartsOf, PolicyOf, SettingsOf
from tarry.api.quotas import CountedStream
from tarry.api.rights import STARTING, Need, may_write, run_guard
from tarry.client import RunHandle, Tarry, TarryError
from tarry.client.rights import check_decision, check_run, may_decide_in
from tarry.client.run_list import RunRow, child_waited_on, find_children, find_runs
from tarry.contracts import (
    DECIDED_WAITS,
    ErrorCode,
    Phase,
    RunInput,
    RunState,
    TranscriptPage,
    WaitingFor,
    may_decide,
)
from tarry.core.identities import Caller
from tarry.core.ownership import Policy, RunAccess
from tarry.search.memory_store import refuse_foreign_scope

__all__ = ["existing", "router"]

_log = logging.getLogger(__name__)

IdempotencyKey = Annotated[
    str | None,
    Header(
        min_length=1,
        max_length=200,
        description="A retried request with the same key is the same request: a start"
        " returns the run the first one started (422 `IDEMPOTENCY_KEY_REUSED` when its body"
        " differs); a message enters the transcript once.",
    ),
]

LastEventId = Annotated[
    str | None,
    Header(
        # ASCII digits only: `int()` takes any Unicode digit (`²`) and fails on some.
        pattern=r"^[0-9]{1,15}$",
        description="The `id:` of the last event received: the stream resumes after it.",
    ),
]

MAX_OFFSET = 10**15 - 1
"""The largest event offset asked for (15 digits): far above any run's stream."""

# Every route that names a run checks the caller's right to it (`tarry.api.rights`).
router = APIRouter(prefix="/v1/runs", tags=["runs"], dependencies=[Depends(run_guard)])


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
        return base64.urlsafe_b64decode(cursor.encode("ascii"))
    except (binascii.Error, ValueError):
        raise TarryError(
            ErrorCode.INPUT_INVALID, "cursor: not a cursor this API gave (next_cursor)"
        ) from None


def resume_offset(after: int | None, last_event_id: str | None) -> int:
    """Where an event stream starts: after `?after=` or the `Last-Event-ID` a browser
    sends when it reconnects (the offset of the last event it received), else at the
    oldest event the run holds."""
    if after is None and last_event_id is not None:
        after = int(last_event_id)  # ASCII digits: `LastEventId` checked them
    return 0 if after is None else after + 1


@router.post(
    "",
    status_code=HTTPStatus.CREATED,
    dependencies=STARTING,
    responses=error_answers(*STARTS),
)
async def start_run(
    body: StartRequest,
    caller: CallerOf,
    tarry: ActingOf,
    policy: PolicyOf,
    parts: PartsOf,
    idempotency_key: IdempotencyKey = None,
) -> Started:
    """Start a run; 409 `RUN_EXISTS` for the id of any run there is, open or ended
    (`POST /v1/runs/{id}/resume` goes on with an ended one). With an Idempotency-Key,
    a retry returns the run the first request started (its id comes from the key,
    unless `id` is given); the key sent with another body is 422
    `IDEMPOTENCY_KEY_REUSED`."""
    run_id = body.id or (idempotent_run_id(caller, idempotency_key) if idempotency_key else None)
    input = RunInput.model_validate(body.model_dump(exclude={"id"}))
    refuse_foreign_scope(policy, caller, input)
    request = start_request(idempotency_key, body) if idempotency_key else None
    if request is not None and run_id is not None:
        await parts.keyed_starts.refuse_another(tarry, caller, request["key"], run_id)
    try:
        run = await tarry.start(
            input,
            run_id=run_id,
            memo={IDEMPOTENCY_MEMO: request} if request else None,
            start_key=request["key"] if request else None,
        )
    except TarryError as e:
        if e.code is not ErrorCode.RUN_EXISTS or request is None or run_id is None:
            raise
        run = tarry.get(run_id)
        try:  # a retry answers the run's state: only to someone who may read it
            await check_run(tarry, policy, caller, run_id, Need.READ)
        except TarryError:
            raise e from None
        await retried_start(run, request, e)
    if request is not None:
        parts.keyed_starts.remember(caller, request["key"], run.id)
    state = await run.served_state()
    return Started(id=run.id, state=StateView.of(state, caller) if state else None)


@router.get("", responses=error_answers(*AUTH, HTTPStatus.UNPROCESSABLE_ENTITY))
async def list_runs(
    phase: Phase | None = None,
    waiting_for: WaitingFor | None = None,
    schedule: ScheduleName | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 20,
    cursor: Annotated[str | None, Query(min_length=1)] = None,
    decidable: bool = False,
    *,
    caller: CallerOf,
    tarry: ActingOf,
    policy: PolicyOf,
) -> RunList:
    """Runs as Temporal's visibility records them (no worker needed), open runs
    first, newest first, a page of `limit` at a time; `schedule`: only the runs
    that schedule started; only the runs the caller may read (`[api] visibility`).
    `decidable`: of a page of runs waiting for a decision (approval, or guardrail), those
    with a call or a held text the caller may decide (each run asked, as only the run
    knows; one whose worker does not answer within seconds is left out: it could not
    take a decision now either); with a `phase` or `waiting_for` that contradicts it, 422."""
    waits: WaitingFor | frozenset[WaitingFor] | None = waiting_for
    if decidable:
        # A filter it contradicts would otherwise be dropped without a word.
        other_phase = phase not in (None, Phase.WAITING_USER)
        if other_phase or (waiting_for is not None and waiting_for not in DECIDED_WAITS):
            raise TarryError(
                ErrorCode.INPUT_INVALID,
                "decidable: lists runs waiting for a decision; leave out phase and"
                " waiting_for, or ask for phase=WaitingUser and waiting_for=approval"
                " (or guardrail)",
            )
        phase, waits = Phase.WAITING_USER, waiting_for or DECIDED_WAITS
    page = await find_runs(
        tarry.client,
        phase=phase,
        waiting_for=waits,
        schedule=schedule,
        limit=limit,
        page_token=_page_token(cursor),
        readable=policy.readable_clause(caller),
    )  # a cursor visibility cannot read is INPUT_INVALID
    rows = await _decidable(tarry, policy, page.rows, caller) if decidable else page.rows
    token = page.next_page_token
    return RunList(
        runs=[RunSummary.of(row) for row in rows],
        next_cursor=base64.urlsafe_b64encode(token).decode() if token else None,
    )


@router.get("/{run_id}", responses=error_answers(*READ))
async def get_run(
    run_id: RunId, request: Request, caller: CallerOf, tarry: ActingOf, settings: SettingsOf
) -> RunView:
    """The run's state (its `state` query), with the calls the caller may decide, each
    with its preview, marked stale when the file it read has changed since (seen in the
    settings' `tarry_workspace_root`)."""
    state = await tarry.get(run_id).state()
    root = settings.tarry_workspace_root
    return await _view(tarry, run_id, state, caller, may_write(request), root)


@router.get("/{run_id}/transcript", responses=error_answers(*READ))
async def get_transcript(
    run_id: RunId,
    tarry: ActingOf,
    start: Annotated[int, Query(ge=0)] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> TranscriptPage:
    """Up to `limit` messages from `start`: fewer when they pass 128 KiB; the next
    page starts at `start` plus the messages given, until `total`."""
    return await tarry.get(run_id).transcript_page(start, limit)


@router.post(
    "/{run_id}/messages",
    status_code=HTTPStatus.ACCEPTED,
    dependencies=STARTING,
    responses={
        HTTPStatus.OK: {"model": RunView, "description": "with ?wait=true"},
        **error_answers(*STARTS),
    },
)
async def post_message(
    run_id: RunId,
    body: MessageRequest,
    response: Response,
    caller: CallerOf,
    tarry: ActingOf,
    policy: PolicyOf,
    wait: bool = False,
    start: bool = False,
    idempotency_key: IdempotencyKey = None,
) -> Accepted | RunView:
    """Reply to the run. The Idempotency-Key is the message's id: a retry enters
    the transcript once. With `?wait=true`, answers 200 with the state at the run's
    next stop point instead of 202 at once. 409 `RUN_BUSY` while the agent works,
    for a run that refuses replies meanwhile (`on_reply_while_running: reject`).

    With `?start=true`, a run is started under the id first (with `input`, or one
    waiting for this reply) unless a run has it: two first messages at once start one
    run and both enter it; 409 `RUN_ENDED` for an ended run under the id. A run that
    has the id by then takes the reply only from someone who may change it (404 or
    403 as without `?start=true`), checked on the run that takes it."""
    if body.input is not None and not start:
        raise TarryError(ErrorCode.INPUT_INVALID, "input: only with ?start=true")
    starting = (body.input or RunInput()) if start else None

    async def admit() -> None:
        await check_run(tarry, policy, caller, run_id, Need.WRITE)

    if not wait:
        await tarry.reply(run_id, body.text, id=idempotency_key, start=starting, admit=admit)
        return Accepted()
    state = await tarry.send(run_id, body.text, id=idempotency_key, start=starting, admit=admit)
    response.status_code = HTTPStatus.OK
    return await _view(tarry, run_id, state, caller)


@router.post(
    "/{run_id}/reply-policy",
    dependencies=JSON_ONLY,
    responses=error_answers(*WRITE),
)
async def set_reply_policy(
    run_id: RunId, body: ReplyPolicyRequest, caller: CallerOf, tarry: ActingOf
) -> RunView:
    """Change what a reply does that arrives while the agent works (`queue`,
    `interrupt`, `reject`): the state at once."""
    state = await tarry.get(run_id).set_reply_policy(body.on_reply_while_running)
    return await _view(tarry, run_id, state, caller)


@router.post("/{run_id}/pins", dependencies=JSON_ONLY, responses=error_answers(*WRITE))
async def pin(run_id: RunId, body: PinBody, caller: CallerOf, tarry: ActingOf) -> RunView:
    """Keep a message in the model's window from the next call on, across pages and
    hand-overs: the state at once, `pinned` listing it. 409 `PIN_UNKNOWN_MESSAGE` for a
    message the run does not have, `PIN_INVALID` for a tool's result, `PINS_OVER_BUDGET`
    when the pinned messages alone would be more than the run's context budget."""
    state = await tarry.get(run_id).pin(body.message)
    return await _view(tarry, run_id, state, caller)


@router.delete("/{run_id}/pins", responses=error_answers(*WRITE))
async def unpin(
    run_id: RunId, message: Annotated[int, Query(ge=0)], caller: CallerOf, tarry: ActingOf
) -> RunView:
    """Let a pinned message leave the model's window as the others do: the state at
    once; 409 `PIN_UNKNOWN_MESSAGE` for a message that is not pinned."""
    state = await tarry.get(run_id).unpin(message)
    return await _view(tarry, run_id, state, caller)


@router.post(
    "/{run_id}/approvals",
    dependencies=JSON_ONLY,
    responses=error_answers(*WRITE),
)
async def decide(
    run_id: RunId, body: DecisionRequest, request: Request, caller: CallerOf, tarry: ActingOf
) -> RunView:
    """Decide on a gated tool call (every pending one when `call_id` is null):
    the state at the run's next stop point, or 409 with an `APPROVAL_*` code when
    the decision cannot apply (nothing pending, an unknown or decided call), 403
    `APPROVAL_NOT_ALLOWED` when the caller is not one of the call's approvers. With
    `remember: "run"`, the like calls after it are decided the same way, unasked."""
    await check_decision(tarry, caller, run_id, body.call_id, writes=may_write(request))
    state = await tarry.get(run_id).decide(
        body.call_id,
        approved=body.approved,
        reason=body.reason,
        arguments=body.arguments,
        remember=body.remember,
    )
    return await _view(tarry, run_id, state, caller, may_write(request))


@router.post(
    "/{run_id}/budget",
    dependencies=JSON_ONLY,
    responses=error_answers(*WRITE),
)
async def raise_budget(
    run_id: RunId, body: BudgetRequest, caller: CallerOf, tarry: ActingOf
) -> RunView:
    """Raise the run's budget (the limits given replace its own): a run waiting for
    it goes on and the answer is the state at its next stop point, else the state
    at once; 422 `BUDGET_INVALID` for a limit not above what the run has spent."""
    state = await tarry.get(run_id).raise_budget(
        max_total_tokens=body.max_total_tokens, max_cost_usd=body.max_cost_usd
    )
    return await _view(tarry, run_id, state, caller)


@router.post(
    "/{run_id}/retry",
    dependencies=JSON_ONLY,
    openapi_extra=BODY_REQUIRED,
    responses=error_answers(*WRITE),
)
async def retry(
    run_id: RunId, caller: CallerOf, tarry: ActingOf, _: EmptyRequest | None = None
) -> RunView:
    """Ask the model again, for a run waiting because its model kept failing
    (`waiting_for: "model"`): the state at the run's next stop point. 409
    `RETRY_NOT_WAITING` for a run that waits for something else."""
    state = await tarry.get(run_id).retry()
    return await _view(tarry, run_id, state, caller)


@router.post(
    "/{run_id}/model",
    dependencies=JSON_ONLY,
    responses=error_answers(*WRITE),
)
async def set_model(
    run_id: RunId, body: ModelRequest, caller: CallerOf, tarry: ActingOf
) -> RunView:
    """Switch the run's next model calls to the worker's profile `profile`: the
    state at once. A run waiting for its model goes on with a retry or a reply."""
    state = await tarry.get(run_id).set_model(body.profile)
    return await _view(tarry, run_id, state, caller)


@router.post(
    "/{run_id}/pause",
    status_code=HTTPStatus.ACCEPTED,
    dependencies=JSON_ONLY,
    openapi_extra=BODY_REQUIRED,
    responses=error_answers(*WRITE),
)
async def pause(
    run_id: RunId, caller: CallerOf, tarry: ActingOf, _: EmptyRequest | None = None
) -> Accepted:
    """Ask the run to wait for a person at its next turn boundary."""
    await tarry.get(run_id).pause()
    return Accepted()


@router.post(
    "/{run_id}/stop",
    status_code=HTTPStatus.ACCEPTED,
    dependencies=JSON_ONLY,
    openapi_extra=BODY_REQUIRED,
    responses=error_answers(*WRITE),
)
async def stop(
    run_id: RunId, caller: CallerOf, tarry: ActingOf, body: StopBody | None = None
) -> Accepted:
    """End the run: a waiting run completes, a working one is aborted."""
    await tarry.get(run_id).stop(body.reason if body else None)
    return Accepted()


@router.post(
    "/{run_id}/resume",
    dependencies=JSON_ONLY,
    openapi_extra=BODY_REQUIRED,
    responses=error_answers(*WRITE),
)
async def resume(
    run_id: RunId, caller: CallerOf, tarry: ActingOf, _: EmptyRequest | None = None
) -> RunView:
    """Go on with an ended run (failed, or stopped) under its id, with its whole
    memory: it waits for a reply. 409 `RUN_NOT_ENDED` for a run still going."""
    run = await tarry.get(run_id).resume()
    state = await run.state()
    return await _view(tarry, run_id, state, caller)


@router.post(
    "/{run_id}/fork",
    status_code=HTTPStatus.CREATED,
    dependencies=STARTING,
    responses=error_answers(*STARTS),
)
async def fork(
    run_id: RunId, body: ForkRequest, caller: CallerOf, tarry: ActingOf, policy: PolicyOf
) -> Started:
    """Start a new run that branches off this one at user message `at`, with `text`
    in its place: this run's input and its conversation before that message, started
    by the caller (403 `NOT_ALLOWED` when its memory scope is not theirs). This run is
    untouched; open and ended runs both fork."""
    admit = functools.partial(refuse_foreign_scope, policy, caller)
    run = await tarry.get(run_id).fork(body.at, body.text, run_id=body.id, admit=admit)
    state = await run.served_state()
    return Started(id=run.id, state=StateView.of(state, caller) if state else None)


@router.get(
    "/{run_id}/events",
    response_class=EventSourceResponse,
    responses={
        HTTPStatus.OK: {"content": {"text/event-stream": {}}},
        **error_answers(*READ, HTTPStatus.TOO_MANY_REQUESTS),
    },
)
async def events(
    run_id: RunId,
    tarry: ActingOf,
    feeds: FeedsOf,
    parts: PartsOf,
    caller: CallerOf,
    after: Annotated[int | None, Query(ge=-1, le=MAX_OFFSET)] = None,
    last_event_id: LastEventId = None,
) -> EventSourceResponse:
    """The run's events as server-sent events: `id:` the offset in the run's
    stream, `event:` the kind, `data:` the `RunEvent` JSON. Resumes after
    `Last-Event-ID` or `?after=`; follows continue-as-new; ends after the run ends."""
    start = resume_offset(after, last_event_id)
    await tarry.get(run_id).describe()  # a 404 is an answer, not an empty stream
    give_back = parts.quotas.open_stream(caller.user)  # `[api.limits] streams_per_user`
    return CountedStream(_sse(feeds, run_id, start), give_back)


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
    except Exception:  # whatever failed: a stream cut without a word looks like a network fault
        _log.exception("the event stream of run %r failed", run_id)
        error = ErrorBody(error=ApiError(code=INTERNAL, message=INTERNAL_MESSAGE))
        yield ServerSentEvent(data=error.model_dump_json(), event="error")


async def _view(
    tarry: Tarry,
    run_id: str,
    state: RunState,
    caller: Caller,
    may_write: bool = True,
    workspace_root: Path | None = None,
) -> RunView:
    """The run as the API answers it: its state, the sub-agents it started, and whether
    `caller` may change it (its previews checked for staleness in `workspace_root`)."""
    children = await find_children(tarry.client, run_id, child_waited_on(state))
    return RunView.of_run(run_id, state, caller, children, may_write, workspace_root)


DECIDABLE_PATIENCE = 3.0
"""Seconds `?decidable=true` waits for one run's state: a run without a worker is asked
for longer than that before Temporal gives up, and it holds up the whole list."""


async def _decidable(
    tarry: Tarry, policy: Policy, rows: list[RunRow], caller: Caller
) -> list[RunRow]:
    """The rows of runs with a pending call `caller` may decide, asked all at once: one
    of its approvers, who may change the run or is named among them (`tarry.api.rights`)."""

    async def may_decide_one(row: RunRow) -> bool:
        run = tarry.get(row.run_id)
        try:
            async with asyncio.timeout(DECIDABLE_PATIENCE):
                state = await run.state()
                pending = state.pending_approvals
                if not any(may_decide(p.approvers, caller.user, caller.groups) for p in pending):
                    return False
                if policy.sees_all(caller) or may_decide_in(state, caller):
                    return True
                access = RunAccess.of((await run.describe()).typed_search_attributes)
        except (TimeoutError, TarryError, RPCError):
            # Unserved, slow, ended meanwhile, or its worker went away mid-query (the
            # server's CANCELLED): this run is left out, the list still answers.
            return False
        return policy.may_write(caller, access)

    answers = await asyncio.gather(*(may_decide_one(row) for row in rows))
    return [row for row, yes in zip(rows, answers, strict=True) if yes]
