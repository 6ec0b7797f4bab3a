"""Waiting for a person to connect their account to an MCP server (or OAuth provider) a
tool call needs (`auth_needed` names them); the call's own wait ends it
(`workflows.auth_waits`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tarry.contracts import WaitingFor
from workflows.waits.wait import Wait

if TYPE_CHECKING:
    from workflows.memory import RunMemory


class Auth(Wait):
    kind = WaitingFor.AUTH
    parks = False

    def holds(self, memory: RunMemory) -> bool:
        return bool(memory.auth_needed)


WAIT = Auth()
