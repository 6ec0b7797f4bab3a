"""`CatalogueCheck`: asks a worker, before a run starts, whether it would refuse it, on a
server without standalone activities.

A run resolves its tools, agents and model profile from its worker's configuration at
its start (`tool_calls.resolve`), and a name the worker lacks fails it. Only a worker
knows its configuration, so the client asks its `catalogue_check` activity first: as a
standalone activity where the server runs them, else through this workflow, which runs
it on the run's task queue and answers with the refusal, if any. It is not a run (`tarry
list`, the API and the inbox list `AgentRun`s only), so a start refused here leaves no
failed run behind, and its activity answers the refusal as a value, so no worker logs a
failure for a typo.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from tarry.contracts import (
        CATALOGUE_CHECK_ACTIVITY,
        CATALOGUE_CHECK_WORKFLOW,
        CatalogueRequest,
        ErrorInfo,
        Timeouts,
    )

_LISTING_TIMEOUT: timedelta = Timeouts.model_fields["tool"].default
"""As long as a run gives its worker to list its tools (its MCP servers' too)."""


@workflow.defn(name=CATALOGUE_CHECK_WORKFLOW)
class CatalogueCheckWorkflow:
    @workflow.run
    async def run(self, request: CatalogueRequest) -> ErrorInfo | None:
        """Why the worker would refuse a run asking for `request`; None: it would not."""
        refusal: ErrorInfo | None = await workflow.execute_activity(
            CATALOGUE_CHECK_ACTIVITY,
            request,
            result_type=ErrorInfo | None,  # type: ignore[arg-type]
            start_to_close_timeout=_LISTING_TIMEOUT,
            summary="would the worker refuse these names?",
        )
        return refusal
