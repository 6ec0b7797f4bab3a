"""`/v1/wait-kinds`: what a run can wait for a person for (`tarry.contracts.waits`), so
that a client (the inbox's filter and tags) shows every kind, a new one too, without
knowing it by name."""

from __future__ import annotations

from http import HTTPStatus

from fastapi import APIRouter

from tarry.api.errors import ErrorBody
from tarry.contracts.waits import WAIT_KINDS, WaitKind

__all__ = ["waits_router"]


def waits_router() -> APIRouter:
    router = APIRouter(prefix="/v1/wait-kinds", tags=["runs"])

    @router.get("", responses={HTTPStatus.UNAUTHORIZED: {"model": ErrorBody}})
    async def wait_kinds() -> list[WaitKind]:
        """Each kind a run's `waiting_for` may name, in the order to list them: its
        `label` for a tag, what it `waits_for` (after "waiting for"), the CLI's `hint`,
        the updates (or signals) that end it with who may send them (`write`: the run's
        writers; `decide`: also the approvers a call names) and the audit act each
        records, and its `[[notify]]` event (null: none). The same for every caller."""
        return list(WAIT_KINDS.values())

    return router
