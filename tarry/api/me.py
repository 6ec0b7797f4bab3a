"""`/v1/me`: who the API takes the caller for, so that a page (the inbox's header) can
say who it acts as: a decision made there is recorded under this name."""

from __future__ import annotations

from http import HTTPStatus

from fastapi import APIRouter
from pydantic import BaseModel

from tarry.api.auth import CallerOf
from tarry.api.errors import ErrorBody
from tarry.api.parts import PolicyOf

__all__ = ["Me", "me_router"]


class Me(BaseModel):
    user: str
    """The name the runs record for what this caller does: the token's user, the
    identity provider's or the sign-in gateway's; without tokens, the local user."""
    groups: list[str]
    """The groups the configuration (or the identity provider) puts the user in."""
    admin: bool = False
    """Whether the user is one of `[api] admins`, who may raise a person's daily caps:
    a page shows an admin's controls only to them (the routes refuse others anyway)."""


def me_router() -> APIRouter:
    router = APIRouter(prefix="/v1/me", tags=["people"])

    @router.get("", responses={HTTPStatus.UNAUTHORIZED: {"model": ErrorBody}})
    async def me(caller: CallerOf, policy: PolicyOf) -> Me:
        """Who the request's token (or gateway, or identity provider) makes the caller:
        401 `UNAUTHORIZED` without one, on an API that asks for one."""
        return Me(user=caller.user, groups=list(caller.groups), admin=policy.is_admin(caller))

    return router
