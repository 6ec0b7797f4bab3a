"""Evaluation datasets: the decision points of recorded runs (`tarry.contracts.datasets`),
selected by a query, kept as immutable, versioned JSON lines.

Every approve, reject and edit a person made is a label, and every final answer with the
reply that followed it. `Datasets.create` finds the runs a query selects (through
visibility, and only those its caller may read: `Policy.readable_clause`), reads each
one's whole transcript and its history, and writes their points as the next version of
the dataset. A version is never changed: creating a dataset again makes version N+1.

Datasets are files (`tarry.client.dataset_store`: each run's conversation stored once, its
points referring to it) rather than payloads in the payload store: a dataset has a name,
versions and a list of them, which a content-addressed store has no way to keep. Its
export, one `DecisionPoint` a line, is what an eval reads. The points hold what the
transcripts hold, so no API key is in them: keys never reach history (see the security
guide).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import BaseModel, ValidationError
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowQueryFailedError
from temporalio.common import TypedSearchAttributes
from temporalio.service import RPCError

from tarry.client.dataset_store import NAME_RULE, DatasetStore, checked_name
from tarry.client.run_handle import RunHandle
from tarry.client.run_list import runs_query
from tarry.client.schedules import schedule_name_problem
from tarry.client.starting import checked_id
from tarry.client.temporal_errors import translated_errors
from tarry.contracts import (
    LLM_ACTIVITY,
    MODEL_ATTRIBUTE,
    OWNER_ATTRIBUTE,
    TOOL_CATALOGUE_ACTIVITY,
    WORKFLOW_TYPE,
    ErrorCode,
    Phase,
)
from tarry.contracts.activities import Catalogue, LlmRequest, LlmResponse, ToolDefinition
from tarry.contracts.datasets import (
    QUERY_KEYS,
    DatasetManifest,
    DecisionPoint,
    GuardrailAsk,
    Label,
    SkippedRun,
    Verdict,
)
from tarry.contracts.guardrails import (
    GUARDRAILS_ACTIVITY,
    GuardDecision,
    Guarded,
    GuardRequest,
)
from tarry.contracts.messages import ChatMessage, DecisionRecord, Usage
from tarry.contracts.run import principal_problem
from tarry.core.errors import TarryError
from tarry.core.identities import Caller
from tarry.temporal.pages import PageStore

__all__ = [
    "MAX_RUNS",
    "NAME_RULE",
    "QUERY_KEYS",
    "RUN_READ_TIMEOUT",
    "DatasetStore",
    "Datasets",
    "RunRecord",
    "RunSelection",
    "decision_points",
    "parse_selection",
    "run_record",
]

MAX_RUNS = 1000
"""The most runs one dataset is built from unless the query's `limit` says otherwise."""
RUN_READ_TIMEOUT = timedelta(seconds=30)
"""How long one run's transcript and history may take to read before the run is left
out of the dataset (`SkippedRun`): a worker that polls but never answers holds a query
for as long as it lives."""
PERSON = frozenset({"signal", "update"})
"""`DecisionRecord.by` of a decision a person made; a deadline's default, a stop's
rejection and an approval rule's decision are no human label, and are left out."""


def _invalid(message: str) -> TarryError:
    return TarryError(ErrorCode.DATASET_INVALID, message)


class RunSelection(BaseModel):
    """Which runs a dataset is built from: `parse_selection` of a query."""

    phase: Phase | None = None
    tool: str | None = None
    """Only runs with a labelled proposal of this tool."""
    since: datetime | None = None
    until: datetime | None = None
    """Runs started in [since, until)."""
    schedule: str | None = None
    agent: str | None = None
    """Only the runs of this sub-agent (`[agents.NAME]`), which leads delegated to."""
    user: str | None = None
    """Only the runs this user owns (`TarryOwner`)."""
    model: str | None = None
    limit: int = MAX_RUNS

    def visibility_query(self, task_queue: str | None, readable: str | None) -> str:
        """The visibility query for these runs (but `tool` and `agent`, which visibility
        does not record and `Datasets.create` checks on each run). Every value in it is
        an enum member, a checked name or a formatted time: nothing typed reaches it."""
        query = runs_query(self.phase, None, task_queue, self.schedule, readable)
        query += f" AND WorkflowType = '{WORKFLOW_TYPE}'"  # runs only: an eval has no points
        if self.user is not None:
            query += f" AND {OWNER_ATTRIBUTE.name} = '{self.user}'"
        if self.model is not None:
            query += f" AND {MODEL_ATTRIBUTE.name} = '{self.model}'"
        if self.since is not None:
            query += f" AND StartTime >= '{self.since.isoformat()}'"
        if self.until is not None:
            query += f" AND StartTime < '{self.until.isoformat()}'"
        if self.agent is not None:
            query += " AND ParentWorkflowId IS NOT NULL"
        return query

    def takes(self, run_id: str) -> bool:
        """Whether run `run_id` is one of `agent`'s runs, when the selection names one:
        a sub-agent's id is `LEAD:AGENT-N` (`workflows.agents.child_id`)."""
        return (
            self.agent is None or re.search(f":{re.escape(self.agent)}-[0-9]+$", run_id) is not None
        )


_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:@-]{0,199}")
"""A tool's, a model profile's or an agent's name in a query."""


def _moment(key: str, value: str) -> datetime:
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise _invalid(f"{key}={value!r}: not a date or an ISO 8601 time (2026-11-01)") from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def parse_selection(query: str) -> RunSelection:
    """The runs `query` selects: whitespace-separated `KEY=VALUE` terms (`QUERY_KEYS`),
    each at most once, all of which a run must match; empty: every run. `DATASET_INVALID`
    names the first term it cannot read."""
    terms: dict[str, str] = {}
    for term in query.split():
        key, equals, value = term.partition("=")
        if not equals or not value:
            raise _invalid(f"{term!r} is no KEY=VALUE term; the keys: {', '.join(QUERY_KEYS)}")
        if key not in QUERY_KEYS:
            raise _invalid(f"unknown key {key!r}; the keys: {', '.join(QUERY_KEYS)}")
        if key in terms:
            raise _invalid(f"{key} is given twice; a run matches every term")
        terms[key] = value
    selection = RunSelection()
    for key, value in terms.items():
        if key == "phase":
            phases = {p.value.lower(): p for p in Phase}
            if value.lower() not in phases:
                raise _invalid(f"phase={value!r}: one of {', '.join(p.value for p in Phase)}")
            selection.phase = phases[value.lower()]
        elif key in ("since", "until"):
            setattr(selection, key, _moment(key, value))
        elif key == "schedule":
            if problem := schedule_name_problem(value):
                raise _invalid(problem)
            selection.schedule = value
        elif key == "user":
            if problem := principal_problem(value):
                raise _invalid(problem)
            selection.user = value
        elif key == "limit":
            if not (value.isascii() and value.isdigit()) or int(value) < 1:
                raise _invalid(f"limit={value!r}: a number of runs, 1 or more")
            selection.limit = int(value)
        else:  # tool, agent, model: names
            if not _WORD.fullmatch(value):
                raise _invalid(f"{key}={value!r} is no name")
            setattr(selection, key, value)
    return selection


@dataclass
class _ModelCall:
    """One completed model call of a run's history."""

    request: LlmRequest
    response: LlmResponse
    latency_ms: float | None


@dataclass
class RunRecord:
    """What a run's history tells of its model calls, beyond its transcript."""

    calls: list[_ModelCall] = field(default_factory=list)
    catalogue: list[ToolDefinition] = field(default_factory=list)
    asked: dict[str, GuardrailAsk] = field(default_factory=dict)
    """The texts guardrails asked people about, by the id of the decision (`guardrail-N`)."""

    def call_of(self, message: ChatMessage) -> _ModelCall | None:
        """The model call whose answer `message` is: the one that proposed the same call
        ids, or, for an answer, that wrote the same words."""
        ids = [c.id for c in message.tool_calls or []]
        for call in self.calls:
            answer = call.response.message
            if ids and ids == [c.id for c in answer.tool_calls or []]:
                return call
            if not ids and not answer.tool_calls and answer.content == message.content:
                return call
        return None


def _human(record: DecisionRecord) -> bool:
    return record.by in PERSON


def _label(record: DecisionRecord) -> Label:
    if not record.approved:
        verdict = Verdict.REJECTED
    else:
        verdict = Verdict.APPROVED if record.arguments is None else Verdict.EDITED
    return Label(
        verdict=verdict,
        by=record.user,
        reason=record.reason if verdict is Verdict.REJECTED else None,
        arguments=record.arguments,
        at=record.at,
    )


def _guardrail_label(decision: GuardDecision) -> Label:
    verdict = Verdict.REJECTED
    if decision.allowed:
        verdict = Verdict.EDITED if decision.edited else Verdict.APPROVED
    reason = decision.reason if verdict is Verdict.REJECTED else None
    return Label(verdict=verdict, by=decision.by, reason=reason)


def _guardrail_points(
    run_id: str, index: int, message: ChatMessage, record: RunRecord, model: str
) -> list[DecisionPoint]:
    """The verdicts people gave on the texts guardrails asked them about, whose hits
    `message` keeps (the text itself is the check's, in the run's history)."""
    points = []
    for hit in message.guardrails:
        decision = hit.decision
        if decision is None or not decision.by_a_person or decision.asked_as is None:
            continue
        if (asked := record.asked.get(decision.asked_as)) is None:
            continue  # a history that could not be read
        points.append(
            DecisionPoint(
                id=f"{run_id}/{index}/{decision.asked_as}",
                run_id=run_id,
                model=model,
                messages=[],
                guardrail=asked,
                label=_guardrail_label(decision),
            )
        )
    return points


def decision_points(
    run_id: str,
    transcript: Sequence[ChatMessage],
    *,
    owner: str | None = None,
    model: str | None = None,
    record: RunRecord | None = None,
) -> list[DecisionPoint]:
    """The labelled proposals of one run's transcript, in its order: each gated call a
    person decided (approved, rejected with its reason, or edited), each final answer,
    with the next user message as its reply, and each text a guardrail asked a person
    about, with their verdict. `messages` is the conversation before the
    proposal as a model is sent it (`ChatMessage.for_model`: no Tarry metadata)."""
    record = record or RunRecord()
    # One conversation, whose beginnings the points share: a copy each grew a run's
    # points with the square of its length.
    conversation = [ChatMessage.model_validate(m.for_model()) for m in transcript]
    points: list[DecisionPoint] = []
    for index, message in enumerate(transcript):
        points += _guardrail_points(run_id, index, message, record, model or "default")
        if message.role != "assistant" or message.interrupted:
            continue
        call = record.call_of(message)
        request = call.request if call else None
        common = {
            "run_id": run_id,
            "owner": owner,
            "model": (request.profile if request else model) or "default",
            "system": request.system if request else None,
            "messages": conversation[:index],
            "tools": (request.tool_definitions if request else None) or record.catalogue,
            "usage": call.response.usage if call and call.response.usage != Usage() else None,
            "latency_ms": call.latency_ms if call else None,
        }
        later = transcript[index + 1 :]
        if message.tool_calls:
            for proposal in message.tool_calls:
                decided = next(
                    (
                        m.decision
                        for m in later
                        if m.role == "tool" and m.tool_call_id == proposal.id and m.decision
                    ),
                    None,
                )
                if decided is not None and _human(decided):
                    points.append(
                        DecisionPoint(
                            id=f"{run_id}/{index}/{proposal.id}",
                            proposal=proposal,
                            label=_label(decided),
                            **common,
                        )
                    )
        elif message.content:
            reply = next((m for m in later if m.role in ("user", "assistant")), None)
            replied = reply is not None and reply.role == "user"
            points.append(
                DecisionPoint(
                    id=f"{run_id}/{index}/answer",
                    answer=message.content,
                    label=Label(
                        verdict=Verdict.ANSWERED,
                        by=reply.by if reply is not None and replied else None,
                        reply=reply.content if reply is not None and replied else None,
                    ),
                    **common,
                )
            )
    return points


async def run_record(client: Client, run_id: str) -> RunRecord:
    """The model calls and the tool catalogue recorded in every history under `run_id`
    (its segments, handed over by continue-as-new, and its resumptions). What cannot be
    decoded (a run from before the catalogue) is left out: usage, latency and tools are
    recorded when they can be had."""
    record = RunRecord()
    converter = client.data_converter
    query = f"WorkflowId = '{checked_id(run_id)}'"
    async for execution in client.list_workflows(query):
        handle = client.get_workflow_handle(run_id, run_id=execution.run_id)
        history = await handle.fetch_history()
        scheduled: dict[int, HistoryEvent] = {}
        started: dict[int, HistoryEvent] = {}
        for event in history.events:
            if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
                # A start the client checked carries the run's catalogue (no activity).
                payloads = event.workflow_execution_started_event_attributes.input.payloads
                with contextlib.suppress(ValidationError, ValueError, TypeError, LookupError):
                    [input] = await converter.decode(payloads, [dict[str, Any]])
                    if input.get("catalogue") is not None:
                        record.catalogue = Catalogue.model_validate(input["catalogue"]).tools
            elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
                scheduled[event.event_id] = event
            elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
                started[event.activity_task_started_event_attributes.scheduled_event_id] = event
            elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
                done = event.activity_task_completed_event_attributes
                asked = scheduled.get(done.scheduled_event_id)
                if asked is None:
                    continue
                attributes = asked.activity_task_scheduled_event_attributes
                kind = attributes.activity_type.name
                with contextlib.suppress(ValidationError, ValueError, TypeError, LookupError):
                    if kind == LLM_ACTIVITY:
                        [response] = await converter.decode(done.result.payloads, [LlmResponse])
                        [request] = await converter.decode(attributes.input.payloads, [LlmRequest])
                        began = started.get(done.scheduled_event_id)
                        latency = (
                            (event.event_time.ToDatetime() - began.event_time.ToDatetime())
                            if began is not None
                            else None
                        )
                        record.calls.append(
                            _ModelCall(
                                request,
                                response,
                                latency.total_seconds() * 1000 if latency is not None else None,
                            )
                        )
                    elif kind == TOOL_CATALOGUE_ACTIVITY:
                        [catalogue] = await converter.decode(done.result.payloads, [Catalogue])
                        record.catalogue = catalogue.tools
                    elif kind == GUARDRAILS_ACTIVITY:
                        [check] = await converter.decode(attributes.input.payloads, [GuardRequest])
                        [guarded] = await converter.decode(done.result.payloads, [Guarded])
                        _asked(record, check, guarded)
    return record


def _asked(record: RunRecord, check: GuardRequest, guarded: Guarded) -> None:
    """Keeps the text of a check that asked a person (`GuardRequest.asks_as`), as the
    check stopped at it: the text the guardrails before the one that asks left. A later
    check under the same id replaces it: the run decided the earlier one at once, from
    memory, and asked nobody."""
    hit = guarded.asking
    if check.asks_as is None or hit is None:
        return
    rail = next((g for g in check.guardrails if g.name == hit.guardrail), None)
    if rail is not None:
        record.asked[check.asks_as] = GuardrailAsk(
            guardrail=rail, on=rail.on, text=guarded.text, matches=hit.matches
        )


class Datasets:
    """Datasets of the runs a client reaches (`Tarry.datasets`)."""

    def __init__(
        self,
        client: Client,
        task_queue: str,
        caller: Caller,
        pages: PageStore | None,
        store: DatasetStore,
    ) -> None:
        self._client = client
        self._task_queue = task_queue
        self._caller = caller
        self._pages = pages
        self.store = store

    async def create(
        self, name: str, query: str = "", *, readable: str | None = None
    ) -> DatasetManifest:
        """Builds the next version of dataset `name` from the runs `query` selects
        (`parse_selection`) among those on this client's task queue, and only those
        `readable` (`Policy.readable_clause`) when given. Each run's transcript is read
        from it, through its worker: a run that cannot be read (`_read`) is left out and
        named in the manifest's `skipped`, so one stuck run does not keep the others
        out. Over a cap of the store: `DATASET_TOO_LARGE`, `DATASET_TOO_MANY_VERSIONS`."""
        checked_name(name)
        selection = parse_selection(query)
        visibility = selection.visibility_query(self._task_queue, readable)
        self.store.check_room(name)
        seen: set[str] = set()
        skipped: list[SkippedRun] = []
        runs = 0
        with self.store.draft(name) as draft:
            async for execution in self._client.list_workflows(visibility):
                if runs >= selection.limit:
                    break
                if execution.id in seen:  # a run's earlier segments: its transcript has them
                    continue
                seen.add(execution.id)
                if not selection.takes(execution.id):
                    continue
                found = await self._read(execution.id, execution.typed_search_attributes)
                if isinstance(found, SkippedRun):
                    skipped.append(found)
                    continue
                if selection.tool is not None and not any(
                    p.proposal is not None and p.proposal.function.name == selection.tool
                    for p in found
                ):
                    continue
                runs += 1
                draft.add(found)
            manifest = DatasetManifest(
                name=name,
                version=1,
                query=query,
                created_by=self._caller.user,
                created_at=datetime.now(UTC),
                runs=runs,
                points=draft.points,
                skipped=skipped,
            )
            return draft.commit(manifest)

    async def _read(
        self, run_id: str, attributes: TypedSearchAttributes
    ) -> list[DecisionPoint] | SkippedRun:
        """Run `run_id`'s points, or why they cannot be had within `RUN_READ_TIMEOUT`: no
        worker answers for it, its workflow task fails, its pages are missing, Temporal
        refuses. A retry would meet the same run, so it is named rather than raised."""
        try:
            async with asyncio.timeout(RUN_READ_TIMEOUT.total_seconds()):
                async with translated_errors(run_id):
                    return await self._points(run_id, attributes)
        except TarryError as e:
            return SkippedRun(run_id=run_id, code=e.code, message=e.message)
        except WorkflowQueryFailedError as e:  # its worker could not replay it
            return SkippedRun(run_id=run_id, code=ErrorCode.RUN_TASK_FAILING, message=str(e))
        except RPCError as e:
            return SkippedRun(run_id=run_id, code=ErrorCode.TEMPORAL_UNAVAILABLE, message=str(e))
        except TimeoutError:
            return SkippedRun(
                run_id=run_id,
                code=ErrorCode.TEMPORAL_UNAVAILABLE,
                message=f"no answer within {RUN_READ_TIMEOUT.total_seconds():g} s",
            )

    async def _points(self, run_id: str, attributes: TypedSearchAttributes) -> list[DecisionPoint]:
        """Run `run_id`'s points: its whole transcript, across pages and hand-overs."""
        handle = RunHandle(
            self._client, self._client.get_workflow_handle(run_id), self._caller, self._pages
        )
        transcript = await handle.transcript()
        return decision_points(
            run_id,
            transcript,
            owner=attributes.get(OWNER_ATTRIBUTE),
            model=attributes.get(MODEL_ATTRIBUTE),
            record=await run_record(self._client, run_id),
        )

    def latest(self) -> list[DatasetManifest]:
        """The latest version of every dataset, by name."""
        return self.store.latest()

    def show(self, name: str, version: int | None = None) -> DatasetManifest:
        """Version `version` of dataset `name` (None: its latest); `DATASET_NOT_FOUND`."""
        return self.store.manifest(name, version)

    def points(self, name: str, version: int | None = None) -> list[DecisionPoint]:
        """The points of version `version` of dataset `name` (None: its latest)."""
        return self.store.points(name, version)

    def export(self, name: str, version: int | None = None) -> str:
        """The version's JSON lines, one `DecisionPoint` a line."""
        return "".join(self.store.lines(name, version))
