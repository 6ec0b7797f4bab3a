"""What the endpoints take from their app: the client, the event feeds, the settings and
who a request is that `create_app` puts on `app.state`, as FastAPI dependencies.

Endpoints and guards take them from the request, never from a closure: FastAPI caches
what it learns of every endpoint and dependency function (4,096 of them), so a function
closing over what its app was made of would keep that (the client, the feeds and the
events they hold) after the app is dropped, and a process making many apps (the test
suite) would grow until its garbage collections stall it for seconds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated

from fastapi import Depends, FastAPI, Request

from tarry.api.feeds import Feeds
from tarry.api.keyed_starts import KeyedStarts
from tarry.api.quotas import UserQuotas
from tarry.api.signin import SignIn
from tarry.client import Tarry
from tarry.config.settings import TarrySettings
from tarry.connections.store import ConnectionStore
from tarry.core.ownership import Policy
from tarry.search import StoreOpener

__all__ = ["AppParts", "FeedsOf", "PartsOf", "PolicyOf", "SettingsOf", "TarryOf", "parts_of"]


@dataclass(frozen=True)
class AppParts:
    """What one app's endpoints work with."""

    tarry: Tarry
    feeds: Feeds
    settings: TarrySettings
    sign_in: SignIn
    """Who a request is: the guard (`tarry.api.auth`) asks it."""
    policy: Policy
    """Who may use which runs (`tarry.core.ownership`)."""
    quotas: UserQuotas
    """Each user's starts and open streams against `[api.limits]`."""
    search: StoreOpener
    """The search index (`TARRY_SEARCH_INDEX`), opened at the first search."""
    keyed_starts: KeyedStarts = field(default_factory=KeyedStarts)
    """The run each Idempotency-Key started."""
    connections: ConnectionStore | None = None
    """People's grants to OAuth servers (`TARRY_CONNECTIONS_KEY`); None: none kept."""

    @classmethod
    def of(cls, tarry: Tarry, settings: TarrySettings) -> AppParts:
        quotas = UserQuotas(settings.api_table().limits)
        search = StoreOpener(settings.tarry_search_index, settings.embedding_profile())
        policy = settings.policy()
        key = settings.tarry_connections_key
        connections = None
        if key is not None:
            connections = ConnectionStore(settings.tarry_connections_db, key.get_secret_value())
        return cls(
            tarry,
            Feeds(tarry),
            settings,
            SignIn.of(settings),
            policy,
            quotas,
            search,
            connections=connections,
        )

    def install(self, app: FastAPI) -> None:
        """Puts these parts where `parts_of` finds them for `app`'s requests."""
        app.state.parts = self


def parts_of(request: Request) -> AppParts:
    """The parts of the app that serves `request`."""
    parts: AppParts = request.app.state.parts
    return parts


def _tarry_of(request: Request) -> Tarry:
    return parts_of(request).tarry


def _feeds_of(request: Request) -> Feeds:
    return parts_of(request).feeds


def _settings_of(request: Request) -> TarrySettings:
    return parts_of(request).settings


def _policy_of(request: Request) -> Policy:
    return parts_of(request).policy


PartsOf = Annotated[AppParts, Depends(parts_of)]
"""All the app's parts, for what the others do not name."""
TarryOf = Annotated[Tarry, Depends(_tarry_of)]
"""The client the app was made with."""
FeedsOf = Annotated[Feeds, Depends(_feeds_of)]
"""The app's one reader of each run's events."""
SettingsOf = Annotated[TarrySettings, Depends(_settings_of)]
"""The settings the app was made with."""
PolicyOf = Annotated[Policy, Depends(_policy_of)]
"""Who may use which runs."""
