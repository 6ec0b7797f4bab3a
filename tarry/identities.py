"""Who acts on a run: a user, and the groups the configuration puts them in.

Every door names the person behind a reply, a decision, a budget raise, a pause or a
stop, and the run records the name (`by`): the HTTP API by the caller's token
(`[api.users]`, `TARRY_API_TOKENS=NAME:TOKEN`), the CLI and `tarry mcp` by `TARRY_USER`,
else `cli:$USER`. Groups (`[api.groups]`) are resolved by the door, and travel with a
decision so the run can check its approvers (`workflows.approvals` says why).
"""

from __future__ import annotations

import getpass
from dataclasses import dataclass

from tarry.contracts import Door

__all__ = ["API_USER", "RESERVED_USERS", "Caller", "local_user", "reserved_user"]

API_USER = "api"
"""The user of a bare token (`TARRY_API_TOKENS=TOKEN`, `[api] tokens`), and of every
request to an API that has no tokens."""


RESERVED_USERS = frozenset(door.value for door in Door if door.value != API_USER)
"""Names no API user may take: the doors an act comes through (`temporal-ui` also being
who a run records when no person is named), so that a record never passes one for the
other; `api` stays the bare token's user."""
_LOCAL_PREFIX = "cli:"


def reserved_user(user: str) -> bool:
    """Whether `user` is a name of `RESERVED_USERS`, or a local one (`cli:NAME`)."""
    return user in RESERVED_USERS or user.startswith(_LOCAL_PREFIX)


@dataclass(frozen=True)
class Caller:
    """A user, the groups they belong to, and the door they come through (what the
    audit trail records with each of their acts)."""

    user: str
    groups: tuple[str, ...] = ()
    door: Door = Door.CLI


def local_user(tarry_user: str | None) -> str:
    """The name of the person at this machine: `TARRY_USER` when set, else `cli:$USER`
    (the login name, prefixed so it cannot pass for an API user of the same name)."""
    if tarry_user:
        return tarry_user
    try:
        login = getpass.getuser()
    except OSError:  # no USER, LOGNAME, ... and no passwd entry (a bare container)
        login = "unknown"
    return f"{_LOCAL_PREFIX}{login}"
