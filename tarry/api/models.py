"""The HTTP API's own bodies; everything else it takes and gives is a Tarry contract
(`RunInput`, `RunState`, `TranscriptPage`, `RunEvent`). A body never says who sends it:
the request's token does (`tarry.api.auth`)."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    WithJsonSchema,
    model_validator,
)
from pydantic_core import PydanticCustomError

from tarry.client.previews import stale
from tarry.client.run_list import RunRow
from tarry.client.schedules import (
    MAX_SCHEDULE_NAME_LENGTH,
    Overlap,
    ScheduleSummary,
    Timing,
    schedule_name_problem,
)
from tarry.contracts import (
    MAX_RUN_ID_LENGTH,
    NOT_A_BOOLEAN,
    RUN_ID_PATTERN,
    Budget,
    PendingApproval,
    ReplyPolicy,
    RunInput,
    RunState,
    may_decide,
    run_id_problem,
)
from tarry.contracts.guardrails import GuardrailHit
from tarry.contracts.previews import Preview
from tarry.core.identities import Caller
from tarry.core.previews import arguments_preview

__all__ = [
    "Accepted",
    "BudgetRequest",
    "DecisionRequest",
    "EmptyRequest",
    "ForkRequest",
    "Health",
    "MessageRequest",
    "ModelRequest",
    "PendingCall",
    "ReplyPolicyRequest",
    "RunId",
    "RunList",
    "RunSummary",
    "RunView",
    "ScheduleList",
    "ScheduleName",
    "ScheduleNote",
    "ScheduleRequest",
    "StartRequest",
    "Started",
    "StateView",
    "StopBody",
]


def _checked_run_id(run_id: str) -> str:
    if problem := run_id_problem(run_id):
        # Its type is the error code the API answers with (`errors.py`).
        raise PydanticCustomError("RUN_ID_INVALID", "{problem}", {"problem": problem})
    return run_id


RunId = Annotated[
    str,
    AfterValidator(_checked_run_id),
    WithJsonSchema(
        {
            "type": "string",
            "pattern": RUN_ID_PATTERN,
            "minLength": 1,
            "maxLength": MAX_RUN_ID_LENGTH,
            "description": "1 to 200 letters, digits, - _ . : @; not starting with a dot.",
        }
    ),
]
"""A run id as the API takes it (path, start body, AG-UI `threadId`): checked at the door
with the one id rule (422 `RUN_ID_INVALID`), and stated in the OpenAPI document."""


def _checked_schedule_name(name: str) -> str:
    if problem := schedule_name_problem(name):
        raise PydanticCustomError("SCHEDULE_INVALID", "{problem}", {"problem": problem})
    return name


ScheduleName = Annotated[
    str,
    AfterValidator(_checked_schedule_name),
    WithJsonSchema(
        {
            "type": "string",
            "pattern": RUN_ID_PATTERN,
            "minLength": 1,
            "maxLength": MAX_SCHEDULE_NAME_LENGTH,
            "description": f"1 to {MAX_SCHEDULE_NAME_LENGTH} letters, digits, - _ . : @; not"
            " starting with a dot (its runs' ids, NAME-<time>, are run ids).",
        }
    ),
]
"""A schedule's name as the API takes it (path, create body, `?schedule=`): 422
`SCHEDULE_INVALID` for one outside the rule."""


class StartRequest(RunInput):
    """A `RunInput`, and the run's id if the caller chooses it."""

    id: RunId | None = None
    """The run id; `run-<short uuid>` if none, or one derived from the Idempotency-Key."""


class PendingCall(BaseModel):
    """A gated tool call as the API shows it: its arguments an object, the shape in which
    a decision (`POST /v1/runs/{id}/approvals`) sends them back edited."""

    call_id: str
    tool: str
    arguments: dict[str, Any] | None
    """The call's arguments; null when the model's text is not a JSON object."""
    arguments_text: str
    """The model's argument text, as it asked."""
    deadline: datetime | None = None
    approvers: list[str] | None = None
    """The users and groups who may decide it (`RunInput.approvers`); null: anyone."""
    may_decide: bool = True
    """Whether the caller of this request may decide it: a decision by anyone else is
    403 `APPROVAL_NOT_ALLOWED` (or `NOT_ALLOWED`, by a reader who is none of its approvers)."""
    rule: int | None = None
    """The approval rule (from 1) that asks about it; null: `require_approval`."""
    preview: Preview
    """What the call would do, as the run recorded it when the call was gated (a diff, a
    new file's lines, the arguments with long strings as text blocks); a call gated before
    previews shows its arguments so."""
    stale: bool | None = None
    """True: a file the preview read has changed since it was made, so the call would not
    do exactly what it shows; false: unchanged; null: not known here (no file read, or
    the API does not see the workers' workspaces)."""
    guardrail: GuardrailHit | None = None
    """Not a tool call: a text guardrail `tool` holds (`PendingApproval.guardrail`), its
    text `arguments.text`; approving allows it, with `{"text": ...}` edits it, rejecting
    blocks it."""

    @classmethod
    def of(
        cls,
        pending: PendingApproval,
        caller: Caller,
        may_write: bool = True,
        workspace_root: Path | None = None,
    ) -> PendingCall:
        """`pending` as `caller` sees it, who may change its run or not (`may_write`):
        without, only a call naming them among its approvers is theirs to decide. Its
        preview is checked for staleness in `workspace_root`, when given."""
        allowed = may_decide(pending.approvers, caller.user, caller.groups)
        try:
            parsed = json.loads(pending.arguments)
        except ValueError:
            parsed = None
        return cls(
            call_id=pending.call_id,
            tool=pending.tool,
            arguments=parsed if isinstance(parsed, dict) else None,
            arguments_text=pending.arguments,
            deadline=pending.deadline,
            approvers=pending.approvers,
            may_decide=allowed and (may_write or bool(pending.approvers)),
            rule=pending.rule,
            preview=pending.preview or arguments_preview(pending.arguments),
            stale=stale(pending.preview, workspace_root)
            if pending.preview and workspace_root
            else None,
            guardrail=pending.guardrail,
        )


class StateView(RunState):
    """A run's `state` as the API answers it: each pending call's arguments an object."""

    # The run's own contract keeps the model's text; over HTTP, one shape both ways.
    pending_approvals: list[PendingCall] = Field(default_factory=list)  # type: ignore[assignment]

    @classmethod
    def of(
        cls,
        state: RunState,
        caller: Caller,
        may_write: bool = True,
        workspace_root: Path | None = None,
    ) -> StateView:
        """`state` as `caller` sees it: which pending calls they may decide, and whether
        their previews are stale (`workspace_root`: the workers' workspaces, if seen)."""
        pending = [
            PendingCall.of(p, caller, may_write, workspace_root) for p in state.pending_approvals
        ]
        return cls(**state.model_dump(exclude={"pending_approvals"}), pending_approvals=pending)


class RunView(StateView):
    """A run's `state`, with its id and its place in a tree of sub-agents."""

    id: str
    parent: str | None = None
    """The run that delegated to this one (`agent__NAME`); null: a run of its own."""
    children: list[str] = Field(default_factory=list)
    """The sub-agent runs this one started, open or ended, oldest first, as Temporal's
    visibility records them: a child is listed a moment after it starts, but the one
    `waiting_on` names always is."""
    may_write: bool = True
    """Whether the caller may change the run (reply, pause, stop, budget, model, fork):
    false for a run shared with them to `read`, or one they only approve calls of."""

    @classmethod
    def of_run(
        cls,
        run_id: str,
        state: RunState,
        caller: Caller,
        children: list[str],
        may_write: bool,
        workspace_root: Path | None = None,
    ) -> RunView:
        view = StateView.of(state, caller, may_write, workspace_root).model_dump()
        return cls(id=run_id, children=children, may_write=may_write, **view)


class Started(BaseModel):
    id: str
    state: StateView | None
    """The run's first state; null when no worker serves its task queue yet."""


class DecisionRequest(BaseModel):
    """A decision on a gated call, by the person whose token the request carries."""

    call_id: str | None = None
    """The call decided on; null decides every pending call."""
    approved: bool
    reason: str | None = None
    """Told to the model when the call is rejected."""
    arguments: dict[str, Any] | None = None
    """Edited arguments to run the call with, checked against the tool's schema."""
    remember: Literal["run"] | None = None
    """`run`: the like calls after it are decided the same way, without asking: those the
    same approval rule asks about, or, when no rule asked, those with the same arguments."""


class MessageRequest(BaseModel):
    text: Annotated[str, Field(json_schema_extra={"minLength": 1, "pattern": r"\S"})]
    """The reply: not empty nor only white space (422 `INPUT_EMPTY`)."""
    input: RunInput | None = None
    """With `?start=true`: the input the run starts with if no run has the id (its
    `prompt` comes before the reply); none starts one that waits for this reply."""


class ReplyPolicyRequest(BaseModel):
    on_reply_while_running: ReplyPolicy
    """What a reply does from now on that arrives while the agent works."""


class PinBody(BaseModel):
    message: int = Field(ge=0)
    """The transcript index of the message to keep in the model's window."""


class ModelRequest(BaseModel):
    profile: Annotated[str, Field(json_schema_extra={"minLength": 1, "pattern": r"\S"})]
    """The name of a model profile the worker has (`TARRY_MODELS`)."""


class BudgetRequest(Budget):
    """The limits to raise: at least one of them."""

    model_config = ConfigDict(
        json_schema_extra={
            "anyOf": [
                {"required": [name], "properties": {name: {"type": kind}}}
                for name, kind in (("max_total_tokens", "integer"), ("max_cost_usd", "number"))
            ]
        }
    )

    @model_validator(mode="after")
    def _one_at_least(self) -> BudgetRequest:
        if self.max_total_tokens is None and self.max_cost_usd is None:
            raise ValueError("name a limit to raise: max_total_tokens, max_cost_usd or both")
        return self


class ForkRequest(BaseModel):
    at: Annotated[int, NOT_A_BOOLEAN] = Field(ge=0)
    """The position, from 0, of the user message the fork branches at (409
    `FORK_POINT_INVALID` for any other message)."""
    text: Annotated[str, Field(json_schema_extra={"minLength": 1, "pattern": r"\S"})] | None = None
    """The text that replaces that message in the fork; null: the message as it was."""
    id: RunId | None = None
    """The fork's run id; `<id>-fork-<short uuid>` if none."""


class StopBody(BaseModel):
    reason: str | None = None
    """Kept in the run's state and result."""


class EmptyRequest(BaseModel):
    """The body of a request that needs no fields: `{}` (or an empty body sent as JSON)."""


class Accepted(BaseModel):
    """The request was handed to the run, which acts on it at its next turn boundary."""

    accepted: Literal[True] = True


class RunSummary(BaseModel):
    """A run as visibility records it, without asking the run (no worker needed)."""

    id: str
    phase: str | None
    waiting_for: str | None
    turns: int | None
    model: str | None
    summary: str | None
    updated_at: datetime
    """When the run ended, else when its latest continue-as-new segment started."""
    schedule: str | None = None
    """The schedule that started the run; null for one started by hand."""
    parent: str | None = None
    """The run that delegated to this one (a sub-agent's); null for a run of its own:
    answer a sub-agent that waits, and its parent goes on."""
    kind: Literal["run", "eval"] = "run"
    """`eval`: an eval of a dataset (`tarry eval`): `GET /v1/evals/{id}` is its report."""

    @classmethod
    def of(cls, row: RunRow) -> RunSummary:
        return cls(id=row.run_id, **row.model_dump(exclude={"run_id", "started"}))


class RunList(BaseModel):
    runs: list[RunSummary]
    next_cursor: str | None
    """Pass as `cursor` for the next page; null after the last."""


class Health(BaseModel):
    temporal: Literal["reachable", "unreachable"]


class ScheduleRequest(Timing):
    """A schedule to create: its name, when it starts runs (`cron` or `every`), what it
    does while its last run is open (`overlap`), and what each run starts with."""

    model_config = ConfigDict(
        json_schema_extra={
            "anyOf": [
                {"required": [name], "properties": {name: {"type": "string"}}}
                for name in ("cron", "every")
            ]
        }
    )

    name: ScheduleName
    overlap: Overlap = Overlap.SKIP
    input: RunInput


class ScheduleNote(BaseModel):
    """Why a schedule is paused or unpaused (`{}` says nothing)."""

    note: str | None = None


class ScheduleList(BaseModel):
    schedules: list[ScheduleSummary]
