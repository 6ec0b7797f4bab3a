"""Tool calls that wait for a person to connect their account (`WaitingFor.AUTH`): a call
of an MCP server with `auth = "oauth"`, or of a tool declared with `@tool(oauth=...)`,
that finds no working grant fails its activity with `AUTH_REQUIRED`, naming the server
(or provider) and the person; the run does not fail but waits,
durably, for that person to connect (the API's callback sends `connected`), then runs the
call again. A stop ends the wait.

Runs recorded before this module never had such a failure, so they give no command here.
"""

from __future__ import annotations

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError

from tarry.contracts import Act, AuthNeed, Connected, ErrorCode, Phase
from workflows import audit
from workflows.memory import RunMemory
from workflows.stage import RunScope


def needed(e: ActivityError) -> tuple[str, str | None] | None:
    """The server and person of a call that failed for want of a grant; None otherwise."""
    cause = e.cause
    if not isinstance(cause, ApplicationError) or cause.type != ErrorCode.AUTH_REQUIRED:
        return None
    details = cause.details[0] if cause.details else {}
    if not isinstance(details, dict) or not isinstance(details.get("server"), str):
        return None
    person = details.get("person")
    return details["server"], person if isinstance(person, str) else None


async def connected(run: RunScope, call_id: str, server: str, person: str | None) -> bool:
    """Waits until `person` connected to `server` (True) or the run is stopped (False)."""
    m = run.memory
    need = AuthNeed(server=server, person=person, call_id=call_id)
    m.auth_needed = [*m.auth_needed, need]
    if m.phase is not Phase.WAITING_USER:
        run.phases.wait()
    await workflow.wait_condition(lambda: need not in m.auth_needed or m.requests.stop)
    m.auth_needed = [n for n in m.auth_needed if n != need]
    if not m.requests.stop:
        run.phases.follow()
    return not m.requests.stop


def record(memory: RunMemory, signal: Connected) -> None:
    """The `connected` signal: every call waiting for that grant goes on."""
    grant = (signal.server, signal.person)
    waiting = [n for n in memory.auth_needed if (n.server, n.person) == grant]
    if not waiting:
        workflow.logger.warning("connected signal for a grant nothing waits for: ignored")
        return
    memory.auth_needed = [n for n in memory.auth_needed if n not in waiting]
    audit.record(memory, Act.CONNECT, signal, f"{signal.person} connected {signal.server}")


def install(run: RunScope) -> None:
    """Registers the `connected` signal: a person connected the account a tool call
    waits for."""

    def connected(signal: Connected) -> None:
        record(run.memory, signal)

    workflow.set_signal_handler("connected", connected)
