"""`POST /v1/limits/{user}/raise`: an admin raises a person's daily caps for the rest of
the day, as `tarry limits raise` does; their runs waiting at the cap go on."""

from __future__ import annotations

from http import HTTPStatus

from fastapi import APIRouter
from pydantic import BaseModel, Field

from tarry.api.auth import CallerOf
from tarry.api.errors import AUTH, error_answers
from tarry.api.parts import PolicyOf, SettingsOf, TarryOf
from tarry.client.ledger import raise_cap, raise_problem
from tarry.contracts.ledger import CapRaise, LedgerState

__all__ = ["CapRaiseBody", "limits_router"]


class CapRaiseBody(BaseModel):
    max_cost_usd: float | None = Field(default=None, gt=0)
    max_tokens: int | None = Field(default=None, gt=0)


def limits_router() -> APIRouter:
    router = APIRouter(prefix="/v1/limits", tags=["limits"])

    @router.post(
        "/{user}/raise",
        responses=error_answers(*AUTH, HTTPStatus.FORBIDDEN, HTTPStatus.UNPROCESSABLE_ENTITY),
    )
    async def raise_daily_cap(
        user: str,
        body: CapRaiseBody,
        caller: CallerOf,
        tarry: TarryOf,
        settings: SettingsOf,
        policy: PolicyOf,
    ) -> LedgerState:
        """Raises `user`'s daily caps until their day ends (`[limits] time_zone`): 403
        `NOT_ALLOWED` for a caller who is no admin, 422 `INPUT_INVALID` for a body with
        neither cap. Answers their ledger of the day."""
        raised = CapRaise(
            max_cost_usd=body.max_cost_usd, max_tokens=body.max_tokens, by=caller.user
        )
        if problem := raise_problem(caller, policy, raised):
            raise problem
        zone = settings.day_time_zone()
        return await raise_cap(tarry.client, tarry.task_queue, user, zone, raised)

    return router
