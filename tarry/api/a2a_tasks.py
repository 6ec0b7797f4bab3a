"""Tarry's runs as A2A tasks (`a2a-sdk`'s protocol types): a task is a run (its id the
run's id), its context the run's conversation (the same id); its status follows the
run's phase, `input-required` carrying what the run waits for, and its artifact is the
run's output once it has ended.

What a person answers over A2A is read here too: a message's words are a reply, and a
data part `{"decision": "approve" | "reject", ...}` a decision on a gated call."""

from __future__ import annotations

import contextlib
import json
import mimetypes
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from a2a.helpers import (
    get_data_parts,
    get_message_text,
    new_data_part,
    new_raw_part,
    new_text_part,
)
from a2a.types import (
    Artifact,
    InvalidParamsError,
    InvalidRequestError,
    Message,
    Part,
    Role,
    Task,
    TaskNotFoundError,
    TaskState,
    TaskStatus,
)
from a2a.utils.errors import A2AError

from tarry.contracts import (
    DECIDED_WAITS,
    ChatMessage,
    ErrorCode,
    Phase,
    RunResult,
    RunState,
    WaitingFor,
)
from tarry.core.errors import TarryError

__all__ = [
    "ANSWERS",
    "DecisionPart",
    "a2a_errors",
    "artifacts_of",
    "decision_of",
    "ended_status",
    "history_of",
    "listed_status",
    "open_status",
    "reply_text",
    "task_of",
]

ANSWERS = 'a reply as text, or a decision as data: {"decision": "approve" | "reject"}'
"""How a person answers a task that waits for them, as its status message says."""

_WORKING_WAITS = frozenset({WaitingFor.SLOT})
"""Waits no person ends: the run is queued behind its owner's other runs."""


@dataclass(frozen=True)
class DecisionPart:
    """A decision on a gated call, sent as a message's data part."""

    approved: bool
    call_id: str | None = None
    """The call decided; None: every call the run waits on."""
    reason: str | None = None
    arguments: dict[str, Any] | None = None
    """The call's arguments as the person edited them; None: as the model asked."""


def decision_of(message: Message) -> DecisionPart | None:
    """The decision a message's data part holds; None for a message without one (a
    reply); `InvalidParamsError` for a data part that is not a decision."""
    for data in get_data_parts(message.parts):
        if not isinstance(data, dict) or "decision" not in data:
            continue
        decision: Literal["approve", "reject"] | Any = data["decision"]
        if decision not in ("approve", "reject"):
            raise InvalidParamsError(
                message=f'decision: "approve" or "reject", not {decision!r}',
                data={"code": str(ErrorCode.INPUT_INVALID)},
            )
        arguments = data.get("arguments")
        if arguments is not None and not isinstance(arguments, dict):
            raise InvalidParamsError(
                message="arguments: the call's arguments as an object",
                data={"code": str(ErrorCode.INPUT_INVALID)},
            )
        return DecisionPart(
            approved=decision == "approve",
            call_id=_text_or_none(data.get("call_id")),
            reason=_text_or_none(data.get("reason")),
            arguments=arguments,
        )
    return None


def _text_or_none(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def reply_text(message: Message) -> str:
    """A message's words: its text parts."""
    return get_message_text(message)


def _agent_message(run_id: str, parts: list[Part], message_id: str) -> Message:
    return Message(
        message_id=message_id,
        context_id=run_id,
        task_id=run_id,
        role=Role.ROLE_AGENT,
        parts=parts,
    )


def _arguments(text: str) -> object:
    """A call's argument text as JSON where it is JSON, else as the model wrote it."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def _waiting_parts(state: RunState) -> list[Part]:
    """What a waiting run shows the person who may answer it."""
    waits = state.waiting_for
    if waits in DECIDED_WAITS and state.pending_approvals:
        calls = [
            {
                "call_id": p.call_id,
                "tool": p.tool,
                "arguments": _arguments(p.arguments),
                **({"guardrail": True} if p.guardrail else {}),
                **({"approvers": p.approvers} if p.approvers else {}),
            }
            for p in state.pending_approvals
        ]
        names = ", ".join(f"{p.tool}({p.arguments})" for p in state.pending_approvals)
        words = f"waiting for a decision on {names}: answer with {ANSWERS}"
        return [new_text_part(words), new_data_part({"waiting_for": waits, "calls": calls})]
    if waits is WaitingFor.AGENT and state.waiting_on:
        words = f"the sub-agent's task {state.waiting_on} waits for a person: answer it there"
        return [
            new_text_part(words),
            new_data_part({"waiting_for": waits, "task": state.waiting_on}),
        ]
    if waits is WaitingFor.AUTH:
        servers = ", ".join(need.server for need in state.auth_needed)
        words = f"waiting for a person to connect their account to {servers} (the inbox's link)"
        return [new_text_part(words), new_data_part({"waiting_for": waits})]
    if waits is WaitingFor.REMOTE and state.question:
        # A remote agent this run delegated to asks: the reply to this task answers it.
        return [new_text_part(state.question), new_data_part({"waiting_for": waits})]
    question = state.last_assistant_text or f"the run waits for {waits or 'a reply'}"
    return [new_text_part(question)]


def open_status(run_id: str, state: RunState) -> TaskStatus:
    """The status of a run that has not ended, from its state."""
    if state.phase is Phase.RUNNING or state.waiting_for in _WORKING_WAITS:
        return TaskStatus(state=TaskState.TASK_STATE_WORKING)
    if state.phase.ended:  # a state read as the run ended: its result says how
        return TaskStatus(state=TaskState.TASK_STATE_WORKING)
    task_state = (
        TaskState.TASK_STATE_AUTH_REQUIRED
        if state.waiting_for is WaitingFor.AUTH
        else TaskState.TASK_STATE_INPUT_REQUIRED
    )
    message = _agent_message(run_id, _waiting_parts(state), f"{run_id}-wait-{state.events}")
    return TaskStatus(state=task_state, message=message)


def ended_status(run_id: str, result: RunResult) -> TaskStatus:
    """The status of an ended run, from its result: canceled when a person stopped it."""
    if result.phase is Phase.FAILED:
        words = result.error.message if result.error else "the run failed"
        message = _agent_message(run_id, [new_text_part(words)], f"{run_id}-failed")
        return TaskStatus(state=TaskState.TASK_STATE_FAILED, message=message)
    if result.stopped_by is not None or result.stop_reason is not None:
        words = f"stopped by {result.stopped_by or 'a person'}" + (
            f": {result.stop_reason}" if result.stop_reason else ""
        )
        message = _agent_message(run_id, [new_text_part(words)], f"{run_id}-stopped")
        return TaskStatus(state=TaskState.TASK_STATE_CANCELED, message=message)
    return TaskStatus(state=TaskState.TASK_STATE_COMPLETED)


MAX_FILE_BYTES = 1024 * 1024
"""The largest file of a run's workspace that goes in its artifacts: a task's answer is
no file server (a bigger one is left out: the workspace holds it)."""
MAX_FILES = 32
"""The most files of a run's workspace its artifacts carry."""


def artifacts_of(run_id: str, result: RunResult, workspace_root: Path | None) -> list[Artifact]:
    """An ended run's artifacts: its output, structured (a data part) where it is JSON, as
    a run with an `output_schema` answers, else its text; and the files it left in its
    workspace (`workspace_root / run_id`), when this machine has them."""
    if result.phase is not Phase.COMPLETED:
        return []
    artifacts = []
    if result.output:
        structured = _arguments(result.output)
        part = (
            new_data_part(structured)
            if isinstance(structured, dict | list)
            else new_text_part(result.output)
        )
        artifacts.append(Artifact(artifact_id=f"{run_id}-output", name="output", parts=[part]))
    if workspace_root is not None and (files := _files(workspace_root / run_id)):
        artifacts.append(Artifact(artifact_id=f"{run_id}-files", name="files", parts=files))
    return artifacts


def _files(workspace: Path) -> list[Part]:
    """The workspace's files as parts (name, type, bytes), in path order: those inside
    it only (a link out of it is not the run's file), up to `MAX_FILES` of at most
    `MAX_FILE_BYTES` each."""
    if not workspace.is_dir():
        return []
    inside = workspace.resolve()
    parts: list[Part] = []
    for path in sorted(workspace.rglob("*")):
        if len(parts) == MAX_FILES:
            break
        if path.is_symlink() or not path.is_file() or not path.resolve().is_relative_to(inside):
            continue
        if path.stat().st_size > MAX_FILE_BYTES:
            continue
        name = path.relative_to(workspace).as_posix()
        media_type = mimetypes.guess_type(name)[0] or "application/octet-stream"
        parts.append(new_raw_part(path.read_bytes(), media_type=media_type, filename=name))
    return parts


def history_of(run_id: str, transcript: list[ChatMessage]) -> list[Message]:
    """The conversation's words as A2A messages: the person's and the agent's (tool calls
    and their results are the run's own business)."""
    history = []
    for index, message in enumerate(transcript):
        if message.role not in ("user", "assistant") or not message.content:
            continue
        role = Role.ROLE_USER if message.role == "user" else Role.ROLE_AGENT
        history.append(
            Message(
                message_id=f"{run_id}-m{index}",
                context_id=run_id,
                task_id=run_id,
                role=role,
                parts=[new_text_part(message.content)],
            )
        )
    return history


def task_of(
    run_id: str,
    status: TaskStatus,
    artifacts: list[Artifact] | None = None,
    history: list[Message] | None = None,
) -> Task:
    return Task(
        id=run_id,
        context_id=run_id,
        status=status,
        artifacts=artifacts or [],
        history=history or [],
    )


_NOT_FOUND = frozenset({ErrorCode.RUN_NOT_FOUND, ErrorCode.RUN_ID_INVALID})


@contextlib.asynccontextmanager
async def a2a_errors() -> AsyncIterator[None]:
    """Tarry's errors as the protocol's: a run the caller may not read (or none) is "task
    not found", as at every door; the others keep their code in the error's data."""
    try:
        yield
    except TarryError as e:
        error: A2AError
        if e.code in _NOT_FOUND:
            error = TaskNotFoundError(message=e.message)
        elif e.code.startswith("INPUT_"):
            error = InvalidParamsError(message=e.message, data={"code": str(e.code)})
        else:
            error = InvalidRequestError(message=e.message, data={"code": str(e.code)})
        raise error from e


def listed_status(phase: str | None, waiting_for: str | None) -> TaskStatus:
    """The status of a run as a list shows it, from what visibility records of it (its
    phase and wait; a stopped run reads as completed there)."""
    match phase:
        case Phase.COMPLETED:
            return TaskStatus(state=TaskState.TASK_STATE_COMPLETED)
        case Phase.FAILED:
            return TaskStatus(state=TaskState.TASK_STATE_FAILED)
        case Phase.WAITING_USER if waiting_for == WaitingFor.AUTH:
            return TaskStatus(state=TaskState.TASK_STATE_AUTH_REQUIRED)
        case Phase.WAITING_USER if waiting_for not in _WORKING_WAITS:
            return TaskStatus(state=TaskState.TASK_STATE_INPUT_REQUIRED)
    return TaskStatus(state=TaskState.TASK_STATE_WORKING)
