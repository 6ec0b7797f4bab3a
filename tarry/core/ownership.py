"""Who may use a run: its owner, the people it is shared with, its approvers, and the
deployment's admins, under the deployment's visibility.

A run belongs to whoever started it (`TarryOwner`): an API user, the CLI's `cli:$USER`
(or `TARRY_USER`), the person who created the schedule that started it; a sub-agent
belongs to its lead's owner. `RunInput.share` names users and `group:NAME`s who may
`read` it (find it, read its state, transcript and events) or `write` it (read it, and
reply, pause, stop, resume, retry, raise its budget, switch its model or reply policy,
fork it). Its approvers may read it, and decide the calls they are approvers of.

The names that may read a run, and those that may write it, are search attributes set
once, when it starts (`access_attributes`): a run list is then a visibility query for the
runs the caller may read (`Policy.readable_clause`), not a filter after the fetch, and a
run's rights are read from Temporal's description of it, without asking its worker.

The HTTP API applies the rules (`tarry.api.rights`); the CLI and `tarry mcp` over stdio
talk to Temporal directly, as an operator with every right, as anyone who can reach
Temporal can.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum

from temporalio.common import SearchAttributeKey, SearchAttributePair, TypedSearchAttributes
from temporalio.converter import encode_typed_search_attribute_value

from tarry.contracts import (
    OWNER_ATTRIBUTE,
    READERS_ATTRIBUTE,
    WRITERS_ATTRIBUTE,
    ErrorCode,
    RunInput,
    Share,
)
from tarry.contracts.run import principal_problem
from tarry.core.errors import TarryError
from tarry.core.identities import GROUP_PREFIX, Caller

__all__ = [
    "ACCESS_ATTRIBUTES",
    "GROUP_PREFIX",
    "Policy",
    "RunAccess",
    "Visibility",
    "access_attributes",
    "carried",
    "principals",
]


class Visibility(StrEnum):
    """`[api] visibility`: which runs each user of the API finds and uses."""

    PRIVATE = "private"
    """Their own, those shared with them and those they approve calls of; admins: all.
    The default whenever the API names its users."""
    TEAM = "team"
    """Every run, with every right (as before runs had owners)."""


def principals(caller: Caller) -> list[str]:
    """The names a share or the admins may give `caller` rights by: their user, and
    `group:NAME` for each of their groups. A user whose name starts `group:` is not
    taken for the group's members: no sign-in gives one (`identities.name_problem`), but
    `TARRY_USER` or a `Caller` of the Python client could."""
    groups = [f"{GROUP_PREFIX}{group}" for group in caller.groups]
    return groups if caller.user.startswith(GROUP_PREFIX) else [caller.user, *groups]


def access_attributes(owner: str, input: RunInput) -> TypedSearchAttributes:
    """The search attributes a run of `input` started by `owner` starts with: its owner,
    who may read it (its share, and its approvers, each named both as a user and as a
    group, as `approvers` names either), and who may write it."""
    approvers = {name for names in input.approvers.values() for name in names}
    readers = set(input.share) | approvers | {f"{GROUP_PREFIX}{a}" for a in approvers}
    writers = {name for name, share in input.share.items() if share is Share.WRITE}
    for key, names in ((READERS_ATTRIBUTE, readers), (WRITERS_ATTRIBUTE, writers)):
        _within_limit(key, sorted(names))
    return TypedSearchAttributes(
        [
            SearchAttributePair(OWNER_ATTRIBUTE, owner),
            SearchAttributePair(READERS_ATTRIBUTE, sorted(readers)),
            SearchAttributePair(WRITERS_ATTRIBUTE, sorted(writers)),
        ]
    )


SEARCH_ATTRIBUTE_LIMIT = 2048
"""The most bytes Temporal takes in one search attribute's value (the server's default
`limit.searchAttributeSize`): a start over it would be refused by Temporal itself, in
words about search attributes that the person who named too many people cannot act on."""


def _within_limit(key: SearchAttributeKey[Sequence[str]], names: list[str]) -> None:
    """Refuses (`INPUT_INVALID`) a run whose `share` and `approvers` name more people than
    its search attribute `key` holds, as the SDK will encode them."""
    size = len(encode_typed_search_attribute_value(key, names).data)
    if size > SEARCH_ATTRIBUTE_LIMIT:
        raise TarryError(
            ErrorCode.INPUT_INVALID,
            f"share and approvers name too many people for one run ({size} bytes of names"
            f" in {key.name}, at most {SEARCH_ATTRIBUTE_LIMIT}); share with a group instead",
        )


ACCESS_ATTRIBUTES = (OWNER_ATTRIBUTE, READERS_ATTRIBUTE, WRITERS_ATTRIBUTE)


def carried(attributes: TypedSearchAttributes) -> TypedSearchAttributes:
    """The owner, readers and writers of `attributes` (a run's), for the run that goes on
    from it: a sub-agent of it, its resumption."""
    names = {key.name for key in ACCESS_ATTRIBUTES}
    return TypedSearchAttributes([p for p in attributes if p.key.name in names])


@dataclass(frozen=True)
class RunAccess:
    """A run's owner and the names that may read and write it, as its search attributes
    hold them; a run started before runs had owners has none of them."""

    owner: str | None = None
    readers: frozenset[str] = frozenset()
    writers: frozenset[str] = frozenset()

    @classmethod
    def of(cls, attributes: TypedSearchAttributes) -> RunAccess:
        return cls(
            attributes.get(OWNER_ATTRIBUTE),
            frozenset(attributes.get(READERS_ATTRIBUTE) or ()),
            frozenset(attributes.get(WRITERS_ATTRIBUTE) or ()),
        )


@dataclass(frozen=True)
class Policy:
    """The deployment's rules: `visibility` (None: one person, with no tokens, has every
    right) and its `admins`, users and `group:NAME`s who may do everything."""

    visibility: Visibility | None = None
    admins: frozenset[str] = frozenset()

    @classmethod
    def of(cls, visibility: Visibility | None, admins: Iterable[str] = ()) -> Policy:
        return cls(visibility, frozenset(admins))

    def sees_all(self, caller: Caller) -> bool:
        """Whether `caller` may read and write every run."""
        return self.visibility is not Visibility.PRIVATE or not self.admins.isdisjoint(
            principals(caller)
        )

    def is_admin(self, caller: Caller) -> bool:
        """Whether `caller` is one of the `admins` (by name or group), or the one person
        of a deployment without sign-in: who may raise a person's daily caps."""
        return self.visibility is None or not self.admins.isdisjoint(principals(caller))

    def may_read(self, caller: Caller, run: RunAccess) -> bool:
        return self.may_write(caller, run) or not run.readers.isdisjoint(principals(caller))

    def may_write(self, caller: Caller, run: RunAccess) -> bool:
        return (
            self.sees_all(caller)
            or run.owner == caller.user
            or not run.writers.isdisjoint(principals(caller))
        )

    def readable_clause(self, caller: Caller) -> str | None:
        """The visibility query's condition for the runs `caller` may read; None: every
        run. A name that could not be quoted safely (a quote in an identity provider's
        claim) is left out: it then finds nothing, rather than something else."""
        if self.sees_all(caller):
            return None
        safe = [name for name in principals(caller) if principal_problem(name) is None]
        conditions = [f"{OWNER_ATTRIBUTE.name} = '{caller.user}'"]
        if principal_problem(caller.user):
            conditions = []
        if safe:
            listed = ", ".join(f"'{name}'" for name in safe)
            conditions.append(f"{READERS_ATTRIBUTE.name} IN ({listed})")
        # No run has an empty id: a caller with no name to find runs by finds none.
        return f"({' OR '.join(conditions)})" if conditions else "WorkflowId = ''"
