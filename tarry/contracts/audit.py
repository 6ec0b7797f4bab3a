"""The audit trail: every act that changes a run, as one record of who, when, through
which door, and what.

The run itself writes the records (`workflows.audit`), each when the act reaches it, at
workflow time, so they are part of the run's history and there is no second store to
lose: the records of a run's current segment are in its memory (the `audit` query),
and each segment's are in the event that closes it (the next segment's hand-over, or
the run's result). `tarry.client.audit` reads them back across a run's whole chain.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, Field

from tarry.contracts._omit import when_none
from tarry.contracts.names import TEMPORAL_UI, ReplyPolicy

__all__ = [
    "AUDIT_ACT_WORKFLOW",
    "AUDIT_LIMIT",
    "AUDIT_QUERY",
    "RESUMED_SIGNAL",
    "Act",
    "Acting",
    "AuditRecord",
    "AuditTrail",
    "Door",
    "ModelSwitch",
    "OtherAct",
    "ReplyPolicyChange",
    "UnreadRun",
]

AUDIT_LIMIT = 1000
"""How many records an audit read answers by default."""


class Door(StrEnum):
    """How an act reached the run. Every door of Tarry names itself in what it sends
    (`door` of a reply, a decision, a stop...); what arrives without one was sent from
    outside Tarry: the Temporal UI, the `temporal` CLI, or a client from before doors."""

    CLI = "cli"
    """The CLI, or a program with the Python client acting as the local user."""
    API = "api"
    INBOX = "inbox"
    """The API, from the inbox's pages (they say so with `X-Tarry-Door: inbox`)."""
    MCP = "mcp"
    LINK = "link"
    """A notification's action link."""
    A2A = "a2a"
    """The API's A2A endpoints (`tarry.api.a2a`): an agent, or a person's A2A client."""
    RULE = "rule"
    """The run itself: an approval rule, a remembered decision, a deadline's default, or
    a lead run starting its sub-agent."""
    SCHEDULE = "schedule"
    TEMPORAL_UI = TEMPORAL_UI


class Act(StrEnum):
    """What changed a run, a schedule or an eval. A new act on a run (a change of who a
    run is shared with, once a run's sharing can change) is a member here and one
    `workflows.audit.record` in the handler that takes it, its payload an `Acting` (`by`
    and `door`); one on a schedule or an eval, a member and one `tarry.client.audit.record_act`
    where the client does it. Names never change."""

    START = "start"
    FORK = "fork"
    """A run started as a fork of another (`what` names the origin)."""
    REPLY = "reply"
    DECISION = "decision"
    BUDGET = "budget"
    MODEL = "model"
    RETRY = "retry"
    REPLY_POLICY = "reply_policy"
    PAUSE = "pause"
    STOP = "stop"
    PIN = "pin"
    """A message pinned in the model's window (`what` names it), or unpinned: `unpin`."""
    UNPIN = "unpin"
    RESUME = "resume"
    PUSH_CONFIG = "push_config"
    """An A2A client set a push config on the run's task (`what` names it), or deleted one:
    `push_config_delete`."""
    PUSH_CONFIG_DELETE = "push_config_delete"
    """An ended run goes on (`RunHandle.resume`): the first record of the run it starts."""
    GUARDRAIL = "guardrail"
    """A guardrail redacted or blocked a text, by the run itself (`by`: `guardrail NAME`,
    door `rule`): `what` says which text, the verdict and the kinds it found."""
    SCHEDULE_CREATE = "schedule_create"
    """The acts on a schedule (its record names it in `schedule`, not `run`)."""
    SCHEDULE_PAUSE = "schedule_pause"
    SCHEDULE_UNPAUSE = "schedule_unpause"
    SCHEDULE_TRIGGER = "schedule_trigger"
    SCHEDULE_DELETE = "schedule_delete"
    CONNECT = "connect"
    """A person connected their account to an MCP server a call waited for (`what`
    names the server; never a token)."""
    EVAL = "eval"
    """An eval's start (its record names it in `eval`)."""


class Acting(BaseModel):
    """Who sends a request to a run, and through which door: the part of a signal's or
    an update's payload the audit trail records."""

    by: str | None = Field(default=None, exclude_if=when_none)
    """Who acts; null (the Temporal UI, an older client) is recorded as `temporal-ui`."""
    door: Door | None = Field(default=None, exclude_if=when_none)
    """The door it came through; null is recorded as `temporal-ui`. Left out while null,
    so older payloads match."""


class ModelSwitch(Acting):
    """The payload of `set_model` from a client that names who acts (older ones send
    the profile's name alone)."""

    profile: str
    models: list[str] | None = Field(default=None, exclude_if=when_none)
    """The profiles (globs) the person switching may use, as their door resolved them
    from the config's `[limits]`: the run refuses another (`MODEL_NOT_ALLOWED`). They
    travel with the switch as a decision's groups do (`workflows.approvals` says why).
    Null: no limits (no `[limits]`, the Temporal UI, an older client); left out then."""


class ReplyPolicyChange(Acting):
    """The payload of `set_reply_policy` from a client that names who acts (older ones
    send the policy alone)."""

    policy: ReplyPolicy


class AuditRecord(BaseModel):
    """One act that changed a run."""

    act: Act
    by: str
    """Who acted: a user, `cli:$USER`, `rule N`, `remembered`, `deadline`, `temporal-ui`."""
    door: Door
    at: datetime
    """Workflow time: when the act reached the run (its workflow task's time)."""
    what: str
    """The act in a line: the call decided and how, the limits set, the stop's reason."""
    run: str | None = Field(default=None, exclude_if=when_none)
    """The run's id, filled in by whoever reads records across runs."""
    schedule: str | None = Field(default=None, exclude_if=when_none)
    """The schedule an act on a schedule changed."""
    eval: str | None = Field(default=None, exclude_if=when_none)
    """The eval an `eval` record started."""


class OtherAct(Acting):
    """An act on something that is not a run (a schedule, an eval), as the client sends
    it to be recorded (`AUDIT_ACT_WORKFLOW`)."""

    act: Act
    what: str
    schedule: str | None = None
    eval: str | None = None


class UnreadRun(BaseModel):
    """A run whose records an audit read could not get: a segment still open that no
    worker serves, one stuck (its workflow task fails) or one that did not answer in
    time. Its records are left out, not guessed; read again once it is served."""

    run: str
    reason: str
    """Why, in a line, with what to do."""


class AuditTrail(BaseModel):
    """What an audit read answers: the records it found, and the runs it could not read."""

    records: list[AuditRecord]
    """Oldest first, each naming its run."""
    unread: list[UnreadRun] = []
    """The runs whose records (some or all) are missing: one run the read could not
    reach never keeps it from answering for the others."""


AUDIT_QUERY = "audit"
"""The query that answers the records of a run's current segment."""
AUDIT_ACT_WORKFLOW = "AuditAct"
"""A workflow that records one act on a schedule or an eval and ends: a schedule and an
eval have no history of their own that could hold their trail, so each act is one of
these, its record in its result, read back as a run's ended segment is. Not a run."""
RESUMED_SIGNAL = "resumed"
"""Sent with the start of a resumed run (an `Acting`): who resumed it, for its trail. A
worker from before it leaves the signal aside: the run goes on unrecorded."""
