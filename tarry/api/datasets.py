"""`/v1/datasets`: evaluation datasets of recorded runs' decisions (`tarry.datasets`),
with the runs routes' guards and errors.

A dataset is built from the runs its creator may read (`Policy.readable_clause`), so it
is theirs: it is read by them and by those who may read every run (the admins, or anyone
under `team` visibility), and is 404 `DATASET_NOT_FOUND` to everyone else, as a run
they may not read is. Its next version is theirs to make too (403 `NOT_ALLOWED`).
"""

from __future__ import annotations

from http import HTTPStatus
from typing import Annotated

from fastapi import APIRouter, Path, Query, Response
from pydantic import Field

from tarry.api.parts import PolicyOf, TarryOf
from tarry.api.routes import _AUTH, _READ, _WRITE, JSON_ONLY, CallerOf, _errors
from tarry.contracts import ErrorCode
from tarry.contracts._closed import Closed
from tarry.contracts.datasets import DatasetManifest
from tarry.datasets import NAME_RULE, Datasets
from tarry.errors import TarryError
from tarry.identities import Caller
from tarry.ownership import Policy

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
    """The latest version of each dataset the caller may read, by name."""


def _readable(policy: Policy, caller: Caller, manifest: DatasetManifest) -> bool:
    return manifest.created_by == caller.user or policy.sees_all(caller)


def _checked(
    datasets: Datasets, policy: Policy, caller: Caller, name: str, version: int | None = None
) -> DatasetManifest:
    """The version's manifest, or `DATASET_NOT_FOUND` as for one there is not when the
    caller may not read it."""
    if not datasets.store.versions(name) or not _readable(policy, caller, datasets.show(name, 1)):
        raise TarryError(ErrorCode.DATASET_NOT_FOUND, f"no dataset {name!r}")
    return datasets.show(name, version)


def datasets_router() -> APIRouter:
    router = APIRouter(prefix="/v1/datasets", tags=["datasets"])

    @router.get("", responses=_errors(*_AUTH))
    async def list_datasets(caller: CallerOf, tarry: TarryOf, policy: PolicyOf) -> DatasetList:
        """The datasets the caller may read: the latest version of each."""
        latest = tarry.datasets.latest()
        return DatasetList(datasets=[m for m in latest if _readable(policy, caller, m)])

    @router.post(
        "", status_code=HTTPStatus.CREATED, dependencies=JSON_ONLY, responses=_errors(*_WRITE)
    )
    async def create_dataset(
        body: DatasetRequest, caller: CallerOf, tarry: TarryOf, policy: PolicyOf
    ) -> DatasetManifest:
        """Create dataset `name`, or its next version, from the runs `query` selects
        among those the caller may read: each call a person approved, rejected or
        edited, and each final answer with the reply that followed it. Each run's
        transcript is read from it: 503 `RUN_NOT_SERVED` while no worker serves one;
        422 `DATASET_INVALID` for a query it cannot read; 403 `NOT_ALLOWED` for
        a name another user's dataset has."""
        datasets = tarry.acting_as(caller).datasets
        if datasets.store.versions(body.name):
            first = datasets.show(body.name, 1)
            if not _readable(policy, caller, first):
                raise TarryError(
                    ErrorCode.NOT_ALLOWED,
                    f"dataset {body.name!r} is another user's; choose another name",
                )
        return await datasets.create(body.name, body.query, readable=policy.readable_clause(caller))

    @router.get("/{dataset}", responses=_errors(*_READ))
    async def get_dataset(
        dataset: DatasetName,
        caller: CallerOf,
        tarry: TarryOf,
        policy: PolicyOf,
        version: VersionOf = None,
    ) -> DatasetManifest:
        """A version of the dataset (the latest if `version` is not given): what selected
        it, who made it when, how many runs and points it holds."""
        return _checked(tarry.datasets, policy, caller, dataset, version)

    # The default response class, so the errors are documented as the JSON they are.
    @router.get(
        "/{dataset}/points",
        responses={
            200: {"content": {JSON_LINES: {"schema": {"type": "string"}}}},
            **_errors(*_READ),
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
        `DecisionPoint` a line, exactly as `tarry dataset export` prints them."""
        manifest = _checked(tarry.datasets, policy, caller, dataset, version)
        lines = tarry.datasets.export(dataset, manifest.version)
        return Response(lines, media_type=JSON_LINES)

    return router
