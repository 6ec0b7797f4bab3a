"""`/v1/datasets`: evaluation datasets of recorded runs' decisions (`tarry.client.datasets`),
with the runs routes' guards and errors.

A version is built from the runs its maker may read (`Policy.readable_clause`), so it is
read by its maker and by those who may read every run (the admins, or anyone under
`team` visibility): each version on its own, as an admin's version of someone's dataset
may hold runs they may not read. To everyone else it is 404 `DATASET_NOT_FOUND`, as a run
they may not read is, and a dataset with no version they may read is not there for them.
A dataset's next version is its first version's maker's to make, or an admin's (403
`NOT_ALLOWED`).
"""

from __future__ import annotations

from collections.abc import Callable
from http import HTTPStatus
from typing import Annotated

from fastapi import APIRouter, Path, Query, Response
from fastapi.responses import StreamingResponse
from pydantic import Field

from tarry.api.access import JSON_ONLY
from tarry.api.auth import CallerOf
from tarry.api.errors import AUTH, READ, WRITE, error_answers
from tarry.api.parts import PolicyOf, TarryOf
from tarry.client.datasets import NAME_RULE
from tarry.contracts import ErrorCode
from tarry.contracts._closed import Closed
from tarry.contracts.datasets import DatasetManifest
from tarry.core.errors import TarryError
from tarry.core.identities import Caller
from tarry.core.ownership import Policy

__all__ = ["DatasetList", "DatasetRequest", "datasets_router"]

JSON_LINES = "application/jsonl"

NAME_PATTERN = f"^{NAME_RULE.pattern}$"
DatasetName = Annotated[str, Path(pattern=NAME_PATTERN, description="The dataset's name.")]
VersionOf = Annotated[
    int | None, Query(ge=1, description="Which version; the latest if not given.")
]


class DatasetRequest(Closed):
    """A dataset to create, or the next version of one."""

    name: str = Field(pattern=NAME_PATTERN)
    """Letters, digits, `_`, `.` and `-`, at most 100, starting with a letter or digit."""
    query: str = Field(default="", max_length=4096)
    """Which runs: `KEY=VALUE` terms (`phase`, `tool`, `since`, `until`, `schedule`,
    `agent`, `user`, `model`, `limit`), all of which a run must match; empty: every run."""


class DatasetList(Closed):
    datasets: list[DatasetManifest]
    """Of each dataset, the latest version the caller may read, by name."""


def _readable(policy: Policy, caller: Caller) -> Callable[[DatasetManifest], bool]:
    """Whether `caller` may read a version: theirs, or they may read every run."""
    return lambda manifest: manifest.created_by == caller.user or policy.sees_all(caller)


def datasets_router() -> APIRouter:
    router = APIRouter(prefix="/v1/datasets", tags=["datasets"])

    @router.get("", responses=error_answers(*AUTH))
    async def list_datasets(caller: CallerOf, tarry: TarryOf, policy: PolicyOf) -> DatasetList:
        """The datasets the caller may read: the latest version of each they may read."""
        return DatasetList(datasets=tarry.datasets.store.latest(_readable(policy, caller)))

    @router.post(
        "", status_code=HTTPStatus.CREATED, dependencies=JSON_ONLY, responses=error_answers(*WRITE)
    )
    async def create_dataset(
        body: DatasetRequest, caller: CallerOf, tarry: TarryOf, policy: PolicyOf
    ) -> DatasetManifest:
        """Create dataset `name`, or its next version, from the runs `query` selects
        among those the caller may read: each call a person approved, rejected or
        edited, and each final answer with the reply that followed it. Each run's
        transcript is read from it: a run that cannot be read (no worker answers for
        it, its workflow task fails) is left out and named in `skipped`. 422
        `DATASET_INVALID` for a query it cannot read, `DATASET_TOO_LARGE` over the
        caps on a version's bytes and points; 409 `DATASET_TOO_MANY_VERSIONS` for a
        dataset with all the versions it may have; 403 `NOT_ALLOWED` for a name
        another user's dataset has."""
        datasets = tarry.acting_as(caller).datasets
        if versions := datasets.store.versions(body.name):
            first = datasets.show(body.name, versions[0])
            if not _readable(policy, caller)(first):
                raise TarryError(
                    ErrorCode.NOT_ALLOWED,
                    f"dataset {body.name!r} is another user's; choose another name",
                )
        return await datasets.create(body.name, body.query, readable=policy.readable_clause(caller))

    @router.get("/{dataset}", responses=error_answers(*READ))
    async def get_dataset(
        dataset: DatasetName,
        caller: CallerOf,
        tarry: TarryOf,
        policy: PolicyOf,
        version: VersionOf = None,
    ) -> DatasetManifest:
        """A version of the dataset (the latest the caller may read if `version` is not
        given): what selected it, who made it when, how many runs and points it holds,
        and the runs it left out because they could not be read."""
        return tarry.datasets.store.manifest(dataset, version, _readable(policy, caller))

    # The default response class, so the errors are documented as the JSON they are.
    @router.get(
        "/{dataset}/points",
        responses={
            200: {"content": {JSON_LINES: {"schema": {"type": "string"}}}},
            **error_answers(*READ),
        },
    )
    async def export_dataset(
        dataset: DatasetName,
        caller: CallerOf,
        tarry: TarryOf,
        policy: PolicyOf,
        version: VersionOf = None,
    ) -> Response:
        """The version's decision points as JSON lines (`application/jsonl`), one
        `DecisionPoint` a line, exactly as `tarry dataset export` prints them: put
        together from the stored runs as they are sent."""
        store = tarry.datasets.store
        manifest = store.manifest(dataset, version, _readable(policy, caller))
        return StreamingResponse(store.lines(dataset, manifest.version), media_type=JSON_LINES)

    return router
