"""Starts with an `Idempotency-Key`: a retry returns the run the first request started,
and the key sent again with another body (another `id` included) starts nothing."""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from dataclasses import dataclass, field

from tarry.api.models import StartRequest
from tarry.client import RunHandle, Tarry, TarryError
from tarry.contracts import OWNER_ATTRIBUTE, START_KEY_ATTRIBUTE, ErrorCode
from tarry.contracts.run import principal_problem
from tarry.core.identities import Caller

IDEMPOTENCY_MEMO = "tarry_idempotency"
"""The memo field of a run started with an Idempotency-Key: digests of the key and of the
start's body, so that a retry is told from another request under the same key."""

KEYED_STARTS_KEPT = 10_000
"""How many Idempotency-Keys' runs `KeyedStarts` keeps: a client retries within minutes,
not ten thousand starts later."""


def idempotent_run_id(caller: Caller, key: str) -> str:
    """The run id a start by `caller` with Idempotency-Key `key` and no id gets: the same
    for every retry, so Temporal itself knows the run (no table here that a restart would
    lose). It is the caller's own: another user's same key (a counter, a date) names
    another id, so no one can take, or find, a run by the key of someone else."""
    return "run-" + _digest(f"{caller.user}\n{key}")[:16]


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def start_request(key: str, body: StartRequest) -> dict[str, str]:
    """What the run's memo keeps of a start with an Idempotency-Key (`IDEMPOTENCY_MEMO`):
    digests only, since a key or a prompt may be private. The body counts as validated,
    so a retry that only orders or spaces its JSON differently is the same request."""
    return {"key": _digest(key), "body": _digest(body.model_dump_json())}


async def retried_start(run: RunHandle, request: dict[str, str], taken: TarryError) -> None:
    """Returns when `run` was started by this very request (a retry); raises
    `IDEMPOTENCY_KEY_REUSED` when its key started it with another body, and `taken`
    (`RUN_EXISTS`) when this key did not start it."""
    description = await run.describe()
    first = await description.memo_value(IDEMPOTENCY_MEMO, default=None)
    if not isinstance(first, dict) or first.get("key") != request["key"]:
        raise taken
    if first.get("body") != request["body"]:
        raise TarryError(
            ErrorCode.IDEMPOTENCY_KEY_REUSED,
            f"this Idempotency-Key started run {run.id!r} with another body; a retry sends"
            " the same body, a new run needs a new key",
        )


@dataclass
class KeyedStarts:
    """The run each key started. This process knows its own starts at once; Temporal's
    visibility (`TarryStartKey`) knows every process's a moment after each start. A key
    is its caller's: another user's same key names none of their runs."""

    recent: OrderedDict[tuple[str, str], str] = field(default_factory=OrderedDict)
    """(user, key digest) -> run id, newest last: what visibility may not list yet."""

    async def refuse_another(self, tarry: Tarry, caller: Caller, key: str, run_id: str) -> None:
        """Raises `IDEMPOTENCY_KEY_REUSED` when the key (digest) started another run than
        `run_id`: sent again with another `id`, it would start a second run."""
        first = await self._run_of(tarry, caller, key)
        if first is not None and first != run_id:
            raise TarryError(
                ErrorCode.IDEMPOTENCY_KEY_REUSED,
                f"this Idempotency-Key started run {first!r}, not {run_id!r}; a retry sends"
                " the same body, a new run needs a new key",
            )

    def remember(self, caller: Caller, key: str, run_id: str) -> None:
        self.recent[caller.user, key] = run_id
        self.recent.move_to_end((caller.user, key))
        while len(self.recent) > KEYED_STARTS_KEPT:
            self.recent.popitem(last=False)

    async def _run_of(self, tarry: Tarry, caller: Caller, key: str) -> str | None:
        if (run_id := self.recent.get((caller.user, key))) is not None:
            return run_id
        if principal_problem(caller.user) is not None:  # a name no query can quote safely
            return None
        owner = f"{OWNER_ATTRIBUTE.name} = '{caller.user}'"
        async for execution in tarry.client.list_workflows(
            f"{START_KEY_ATTRIBUTE.name} = '{key}' AND {owner}", limit=1
        ):
            return execution.id
        return None
