"""`/v1/a2a/push/{run_id}/{call}`: the push notifications of the remote A2A agents runs
delegate to (`workflows.remote_agents`). A notification ends the call's durable wait at
once, without the poll the run would otherwise make.

The remote is no Tarry user: the route takes no bearer token. Its guard is the token the
worker gave the remote for this call alone (`tarry.core.a2a_push`): a notification
without it, or with another call's, is 403 `A2A_PUSH_REFUSED`, and the run is not told.
"""

from __future__ import annotations

from http import HTTPStatus
from typing import Annotated, Any

from fastapi import APIRouter, Body, Header, Path, Response

from tarry.api.errors import error_answers
from tarry.api.models import RunId
from tarry.api.parts import SettingsOf, TarryOf
from tarry.contracts import Door, ErrorCode
from tarry.core.a2a_push import PUSH_TOKEN_HEADER, valid_push_token
from tarry.core.a2a_tasks import news_of
from tarry.core.errors import TarryError
from tarry.core.identities import Caller

__all__ = ["a2a_push_router"]

CallId = Annotated[str, Path(description="The remote call, `LEAD:NAME-N`.", max_length=400)]


def a2a_push_router() -> APIRouter:
    router = APIRouter(prefix="/v1/a2a/push", tags=["a2a"])

    @router.post(
        "/{run_id}/{call}",
        status_code=HTTPStatus.NO_CONTENT,
        responses=error_answers(HTTPStatus.FORBIDDEN, HTTPStatus.NOT_FOUND),
    )
    async def push(
        run_id: RunId,
        call: CallId,
        body: Annotated[dict[str, Any], Body(description="An A2A `StreamResponse`.")],
        tarry: TarryOf,
        settings: SettingsOf,
        token: Annotated[str | None, Header(alias=PUSH_TOKEN_HEADER, max_length=200)] = None,
    ) -> Response:
        """Tells run `run_id` of its remote call's task news. 403 `A2A_PUSH_REFUSED`
        without this call's token, 422 `INPUT_INVALID` for a body that is no A2A
        `StreamResponse`, 404 `RUN_NOT_FOUND` for a run that is gone."""
        if not valid_push_token(settings.action_key(), run_id, call, token):
            raise TarryError(
                ErrorCode.A2A_PUSH_REFUSED,
                f"this push carries no token the workers gave call {call} of run {run_id}",
            )
        try:
            news = news_of(body)
        except ValueError as e:
            raise TarryError(ErrorCode.INPUT_INVALID, str(e)) from None
        if news is not None:
            run = tarry.get(run_id, Caller(user=f"a2a:{call}", door=Door.API))
            await run.remote_news(news.model_copy(update={"call": call}))
        return Response(status_code=HTTPStatus.NO_CONTENT)

    return router
