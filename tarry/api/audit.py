"""`/v1/audit`: the audit trail (`tarry.client.audit`), across runs through visibility, with the
runs routes' guards and errors."""

from __future__ import annotations

import contextlib
import re
from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Query, Request
from pydantic import BeforeValidator, WithJsonSchema
from pydantic_core import PydanticCustomError

from tarry.api.auth import caller_of
from tarry.api.errors import READ, error_answers
from tarry.api.models import RunId
from tarry.api.parts import PolicyOf, TarryOf
from tarry.api.rights import Need
from tarry.client.audit import AUDIT_LIMIT
from tarry.client.rights import check_run
from tarry.contracts import AuditTrail

__all__ = ["audit_router"]

MAX_AUDIT_LIMIT = 10_000
_RFC_3339 = re.compile(
    r"\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:(?P<second>\d{2})(\.\d+)?([Zz]|[+-]\d{2}:\d{2})"
)


def _moment(value: object) -> datetime:
    """An RFC 3339 time, as the document promises: not the numbers (Unix times) or the
    times without a zone that pydantic would take too; a leap second is the second before."""
    text = value if isinstance(value, str) else ""
    if match := _RFC_3339.fullmatch(text):
        second = match.span("second")
        if match["second"] == "60":
            text = f"{text[: second[0]]}59{text[second[1] :]}"
        with contextlib.suppress(ValueError):  # a day or an hour out of range
            return datetime.fromisoformat(text)
    raise PydanticCustomError(
        "INPUT_INVALID", "not an RFC 3339 time with a zone (2026-11-27T09:00:00Z)"
    )


Moment = Annotated[
    datetime,
    BeforeValidator(_moment),
    WithJsonSchema({"type": "string", "format": "date-time"}),
]


def audit_router() -> APIRouter:
    router = APIRouter(prefix="/v1/audit", tags=["audit"])

    @router.get("", responses=error_answers(*READ))
    async def read_audit(
        request: Request,
        tarry: TarryOf,
        policy: PolicyOf,
        run: RunId | None = None,
        user: Annotated[str | None, Query(min_length=1, max_length=200)] = None,
        since: Moment | None = None,
        limit: Annotated[int, Query(ge=1, le=MAX_AUDIT_LIMIT)] = AUDIT_LIMIT,
    ) -> AuditTrail:
        """The acts that changed runs (start, reply, decision, budget, model, pause, stop,
        fork...), each with who, when (the run's own clock), the door it came through and
        what, oldest first: of run `run` (else every run open at or after `since`), by
        `user`, at or after `since` (ISO 8601 with a zone), the first `limit`. Read from
        the runs' histories, so a run's open segment needs its worker: a run whose
        records cannot be read (no worker, stuck, too slow) is left out and named in
        `unread`, with why, and the others answer; 404 `RUN_NOT_FOUND` for a run there
        is not, or one the caller may not read: only the runs they may read are looked
        at."""
        caller = caller_of(request)
        if run is not None:
            await check_run(tarry, policy, caller, run, Need.READ)
        readable = policy.readable_clause(caller)
        return await tarry.audit(run=run, user=user, since=since, limit=limit, readable=readable)

    return router
