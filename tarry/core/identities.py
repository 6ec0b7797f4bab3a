"""Who acts on a run: a user, and the groups the configuration puts them in.

Every door names the person behind a reply, a decision, a budget raise, a pause or a
stop, and the run records the name (`by`): the HTTP API by the caller's token
(`[api.users]`, `TARRY_API_TOKENS=NAME:TOKEN`), the identity provider's JWT or a sign-in
gateway's header, the CLI and `tarry mcp` by `TARRY_USER`, else `cli:$USER`. Groups
(`[api.groups]`) are resolved by the door, and travel with a decision so the run can
check its approvers (`workflows.approvals` says why).

One rule (`name_problem`) decides which names a person may have, whichever source names
them: a record, a share or a list of approvers then never takes one for another.
"""

from __future__ import annotations

import getpass
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass

from tarry.contracts import Door
from tarry.core.limits import Limits

__all__ = [
    "API_USER",
    "GROUP_PREFIX",
    "LOCAL_PREFIX",
    "NAME_LIMIT",
    "OIDC_PREFIX",
    "RESERVED_USERS",
    "SIGNED_IN_RESERVED",
    "Caller",
    "local_user",
    "member_problem",
    "name_problem",
    "shown",
]

API_USER = "api"
"""The user of a bare token (`TARRY_API_TOKENS=TOKEN`, `[api] tokens`). A request to an
API that has no tokens is the local user's (`local_user`), as the CLI's are."""

RESERVED_USERS = frozenset(
    {door.value for door in Door if door.value != API_USER} | {"remembered", "deadline"}
)
"""Names no person may take: the doors an act comes through (`temporal-ui` also being
who a run records when no person is named) and the run's own deciders (`remembered`, a
deadline's default), so that a record never passes one for the other; `api` stays the
bare token's user."""
SIGNED_IN_RESERVED = RESERVED_USERS | {API_USER}
"""Names the identity provider and a sign-in gateway may not give: the reserved ones,
and `api`, which only a bare token (a configuration's) makes a person."""
LOCAL_PREFIX = "cli:"
"""The local user's names: `cli:$USER`."""
GROUP_PREFIX = "group:"
"""How a share, the admins and `TarryReaders` name a group's members: `group:ops`."""
OIDC_PREFIX = "oidc:"
"""The identity provider's users that `[api.oidc.users]` does not map: `oidc:SUB`."""
RESERVED_PREFIXES = (LOCAL_PREFIX, GROUP_PREFIX, OIDC_PREFIX, "rule ", "schedule ")
"""Beginnings of the names Tarry gives: the local users, groups, the identity
provider's users, approval rules (`rule 2`), schedules (`schedule nightly`, who starts a
scheduled run)."""
NAME_LIMIT = 64
"""The most characters a name has: it is shown in every record and list, and goes into
the runs' search attributes (`tarry.core.ownership`)."""


def name_problem(
    name: str, groups: Iterable[str] = (), reserved: frozenset[str] = RESERVED_USERS
) -> str | None:
    """Why `name` cannot be a person's name (a user of `[api.users]`, the identity
    provider's, a sign-in gateway's); None when it can. It is refused when it is blank
    or has white space at its ends, has more than `NAME_LIMIT` characters, holds a
    character that is not printed (control, format such as a zero-width space, line or
    paragraph separators) or a quote or backslash (it goes into visibility queries), or
    is, written any way (case, compatibility forms), a name Tarry gives to no person or
    one of `groups` (approvers name both). `reserved`: the names Tarry gives to no
    person; a sign-in's adds `api`, the bare tokens' user (`SIGNED_IN_RESERVED`)."""
    if problem := _spelling_problem(name):
        return problem
    folded = _folded(name)
    if folded in reserved or folded.startswith(RESERVED_PREFIXES):
        names = ", ".join(sorted(reserved))
        return (
            f"{shown(name)} is a name Tarry records for no person ({names}, cli:NAME,"
            " group:NAME, oidc:NAME, rule N, schedule NAME); name the user otherwise"
        )
    if folded in {_folded(group) for group in groups}:
        return (
            f"{shown(name)} names a user and a group of [api.groups]; approvers could not"
            " tell them apart"
        )
    return None


def member_problem(name: str, groups: Iterable[str] = ()) -> str | None:
    """Why `name` cannot name a person in `[api.groups]` or `[api] admins`; None when it
    can: a person's name (`name_problem`), or the name Tarry gives a local user
    (`cli:NAME`) or an unmapped user of the identity provider (`oidc:SUB`), whose rest
    follows the same rule."""
    for prefix in (LOCAL_PREFIX, OIDC_PREFIX):
        if name.startswith(prefix):
            return name_problem(name.removeprefix(prefix), groups)
    return name_problem(name, groups)


def _spelling_problem(name: str) -> str | None:
    if not name.strip() or name != name.strip():
        return f"{shown(name)} is no name: give one without white space at its ends"
    if len(name) > NAME_LIMIT:
        return f"{shown(name)} is {len(name)} characters long; a name has at most {NAME_LIMIT}"
    if any(c in "'\\\"" or not c.isprintable() for c in name):
        return (
            f"{shown(name)}: a name has no quotes, backslashes, control or invisible"
            " characters; give it as people read it"
        )
    return None


def _folded(name: str) -> str:
    """`name` as it reads: compatibility forms (fullwidth letters) and case folded away."""
    return unicodedata.normalize("NFKC", name).casefold()


def shown(name: str) -> str:
    """`name` quoted for a message, its unprinted characters escaped (`'alice\\u200b'`),
    cut after `NAME_LIMIT` characters."""
    return repr(name) if len(name) <= NAME_LIMIT else f"{name[:NAME_LIMIT]!r}…"


@dataclass(frozen=True)
class Caller:
    """A user, the groups they belong to, the door they come through (what the
    audit trail records with each of their acts), and their limits."""

    user: str
    groups: tuple[str, ...] = ()
    door: Door = Door.CLI
    limits: Limits | None = None
    """What they may use and spend (`tarry.core.limits`), resolved from the config's
    `[limits]` with their groups; None: no `[limits]`, nothing is refused them."""


def local_user(tarry_user: str | None) -> str:
    """The name of the person at this machine: `TARRY_USER` when set, else `cli:$USER`
    (the login name, prefixed so it cannot pass for an API user of the same name)."""
    if tarry_user:
        return tarry_user
    try:
        login = getpass.getuser()
    except OSError:  # no USER, LOGNAME, ... and no passwd entry (a bare container)
        login = "unknown"
    return f"{LOCAL_PREFIX}{login}"
