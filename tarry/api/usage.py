"""`GET /v1/usage`: what the runs spent, per person, model profile or day, as `tarry
usage` prints it (`tarry.client.usage`): a person sees their own usage, an admin
(`[api] admins`) everyone's. The inbox's usage page (`usage.html`) draws it."""

from __future__ import annotations

from datetime import UTC, datetime
from http import HTTPStatus
from typing import Annotated

from fastapi import APIRouter, Query

from tarry.api.audit import Moment
from tarry.api.auth import CallerOf
from tarry.api.errors import AUTH, error_answers
from tarry.api.parts import PolicyOf, SettingsOf, TarryOf
from tarry.client.usage import DEFAULT_SINCE, UsageBy, UsageReport, usage_report, whose_usage

__all__ = ["usage_router"]

Name = Annotated[str | None, Query(min_length=1, max_length=200)]


def usage_router() -> APIRouter:
    router = APIRouter(prefix="/v1/usage", tags=["usage"])

    @router.get(
        "",
        responses=error_answers(*AUTH, HTTPStatus.FORBIDDEN, HTTPStatus.UNPROCESSABLE_ENTITY),
    )
    async def usage(
        user: Name = None,
        group: Name = None,
        since: Moment | None = None,
        by: UsageBy = UsageBy.USER,
        *,
        caller: CallerOf,
        tarry: TarryOf,
        settings: SettingsOf,
        policy: PolicyOf,
    ) -> UsageReport:
        """Runs, turns and estimated cost of the runs started since `since` (by default
        the last 7 days), a row per `by`; `user`, `group` (of `[api.groups]`): only
        theirs. A caller who is no admin is answered their own usage, and 403
        `NOT_ALLOWED` for another person's."""
        users = whose_usage(caller, policy, settings.api_table().groups, user, group)
        since_at = since or datetime.now(UTC) - DEFAULT_SINCE
        return await usage_report(
            tarry.client,
            tarry.task_queue,
            by=by,
            since=since_at,
            time_zone=settings.day_time_zone(),
            users=users,
        )

    return router
