"""`GET /v1/runs/{run_id}/timeline`: where a run's time went (`tarry.client.timeline`), what the
inbox's run page draws as a waterfall and `tarry show RUN --timeline` prints."""

from __future__ import annotations

from fastapi import APIRouter, Depends

from tarry.api.errors import READ, error_answers
from tarry.api.models import RunId
from tarry.api.parts import TarryOf
from tarry.api.rights import run_guard
from tarry.contracts import RunTimeline

__all__ = ["timeline_router"]


def timeline_router() -> APIRouter:
    # The runs routes' guard: a run the caller may not read is 404 `RUN_NOT_FOUND`.
    router = APIRouter(prefix="/v1/runs", tags=["runs"], dependencies=[Depends(run_guard)])

    @router.get("/{run_id}/timeline", responses=error_answers(*READ))
    async def get_timeline(run_id: RunId, tarry: TarryOf) -> RunTimeline:
        """The run's model calls, tool calls, waits for a person and sub-agents, each with
        its offset from the run's start, its duration, and the tokens and cost of a model
        call or sub-agent; a span still open has a null `end` and is measured to `now`.
        Read from the run's Temporal history across its hand-overs, so no worker is
        needed; 404 `RUN_NOT_FOUND` for a run there is not."""
        return await tarry.get(run_id).timeline()

    return router
