"""The rules every door checks a run's ids and replies against, and who may decide a call:
the client, the HTTP API and the workflow apply the same ones."""

from __future__ import annotations

import re
from collections.abc import Iterable

from tarry.contracts.names import MAX_INPUT_BYTES, ErrorCode

__all__ = [
    "MAX_RUN_ID_LENGTH",
    "RUN_ID_PATTERN",
    "SCHEDULED_ID",
    "SUB_AGENT_ID",
    "approvers_of",
    "may_decide",
    "reply_problem",
    "reserved_id_problem",
    "run_id_problem",
]

RUN_ID_PATTERN = r"^(?!\.)[A-Za-z0-9_.:@-]{1,200}$"
"""What a run id may be, at every door (client, CLI, API, MCP): 1 to 200 letters, digits,
`-`, `_`, `.`, `:` and `@`, not starting with a dot. An id names the run's workspace
directory and is shown in the inbox and the Temporal UI, so `/`, `..`, control and
right-to-left override characters, which would escape the one or spoof the others, are
never an id; Temporal's own limit (1,000 characters) is far above any id a person reads."""
MAX_RUN_ID_LENGTH = 200
_RUN_ID = re.compile(RUN_ID_PATTERN)


def run_id_problem(run_id: str) -> str | None:
    """Why `run_id` cannot be a run id (see `RUN_ID_PATTERN`), or None when it can."""
    if _RUN_ID.fullmatch(run_id):
        return None
    if not run_id:
        return "a run id cannot be empty"
    if len(run_id) > MAX_RUN_ID_LENGTH:
        return f"a run id has at most {MAX_RUN_ID_LENGTH} characters, not {len(run_id)}"
    if run_id.startswith("."):
        return f"a run id cannot start with a dot: {run_id!r}"
    bad = next(c for c in run_id if not re.fullmatch(r"[A-Za-z0-9_.:@-]", c))
    return f"a run id has only letters, digits and - _ . : @, not {bad!r}: {run_id!r}"


SCHEDULED_ID = re.compile(r".+-\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")
"""The ids Temporal gives a schedule's runs, `NAME-<time>`: Temporal drops a firing whose
id a run has taken without a trace (no count, no error)."""
SUB_AGENT_ID = re.compile(r".+:[^:]+-\d+")
"""The ids a lead gives its sub-agents, `LEAD:NAME-N` (`workflows.agents.child_id`)."""


def reserved_id_problem(run_id: str) -> str | None:
    """Why a run started by hand (`start`, a first message's `?start=true`, an AG-UI
    thread) may not take `run_id`, or None when it may. A schedule's and a sub-agent's
    ids can be told in advance, so a person who took one first would squat them: the
    schedule's firing would be dropped, the lead's sub-agent would fail to start, and
    replies meant for either would reach the squatter's run instead."""
    if SCHEDULED_ID.fullmatch(run_id):
        return (
            f"{run_id!r} is an id a schedule gives its run (NAME-<time>): only that"
            " schedule starts a run under it; choose another id"
        )
    if SUB_AGENT_ID.fullmatch(run_id):
        return (
            f"{run_id!r} is an id a lead gives its sub-agent (LEAD:NAME-N): only that lead"
            " starts a run under it; choose another id"
        )
    return None


def reply_problem(text: str) -> tuple[ErrorCode, str] | None:
    """Why `text` cannot be a reply (`INPUT_EMPTY`, `INPUT_TOO_LARGE`), or None when it
    can: the one check the client, the `send` validator and the `user_input` signal make."""
    if not text.strip():
        return ErrorCode.INPUT_EMPTY, "the reply is empty"
    if (size := len(text.encode())) > MAX_INPUT_BYTES:
        return (
            ErrorCode.INPUT_TOO_LARGE,
            f"the reply has {size} bytes; the limit is {MAX_INPUT_BYTES}",
        )
    return None


def approvers_of(approvers: dict[str, list[str]], tool: str) -> list[str] | None:
    """Who may decide a call of `tool` under `RunInput.approvers`: the tool's own entry,
    else the `*` entry; None: anyone."""
    return approvers.get(tool, approvers.get("*"))


def may_decide(approvers: list[str] | None, user: str | None, groups: Iterable[str]) -> bool:
    """Whether `user`, a member of `groups`, may decide a call `approvers` may decide.
    A decision without a user is an operator's, straight from Temporal: always allowed."""
    if approvers is None or user is None:
        return True
    return user in approvers or any(group in approvers for group in groups)
