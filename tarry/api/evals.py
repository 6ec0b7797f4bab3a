"""`/v1/evals/{id}`: an eval's report (`tarry.client.evals`), for the inbox's report page and
scripts, with the runs routes' guards and errors. An eval id follows the run id rule."""

from __future__ import annotations

from fastapi import APIRouter

from tarry.api.auth import CallerOf
from tarry.api.errors import READ, error_answers
from tarry.api.models import RunId
from tarry.api.parts import PolicyOf, TarryOf
from tarry.api.rights import Need
from tarry.client.evals import eval_report
from tarry.client.rights import check_run
from tarry.contracts import ErrorCode, EvalReport
from tarry.core.errors import TarryError

__all__ = ["evals_router"]


def evals_router() -> APIRouter:
    router = APIRouter(prefix="/v1/evals", tags=["evals"])

    @router.get("/{eval_id}", responses=error_answers(*READ))
    async def read_eval(
        tarry: TarryOf, policy: PolicyOf, caller: CallerOf, eval_id: RunId
    ) -> EvalReport:
        """The eval's report: agreement overall and per tool with 95% Wilson intervals,
        cost and latency beside the original runs', and every disagreement with both
        proposals and the person's decision. Its progress while it runs (`done: false`);
        404 `EVAL_NOT_FOUND` for an id no eval has, or one the caller may not read (an
        eval is its starter's, as a run is)."""
        try:
            await check_run(tarry, policy, caller, eval_id, Need.READ)
        except TarryError as e:
            if e.code is not ErrorCode.RUN_NOT_FOUND:
                raise
            raise TarryError(ErrorCode.EVAL_NOT_FOUND, f"no eval {eval_id!r}") from None
        return await eval_report(tarry.client, eval_id)

    return router
