"""`tarry dev --tour oauth`: the stack of `tarry dev` and, beside it, a local authorization
server and an MCP server, `tickets`, that requires its tokens (`tarry.testing.oauth_servers`:
what tests/test_oauth.py runs on), with a config that names that server `auth = "oauth"`
(docs/guides/acting-as-a-person.md, "Try it offline").

The servers start first: the config names their ports, known once they listen, and the
service token the worker lists `tickets`' tools with, which the authorization server
issues. The config is written into the data directory (`oauth-tour.toml`), beside the
connections key (`oauth-tour.key`, made once): a restarted tour keeps its grants, and
`tarry connections` in another terminal reads them with that key.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Coroutine
from datetime import timedelta
from pathlib import Path
from typing import Any

from cryptography.fernet import Fernet

from tarry.cli.common import fail
from tarry.cli.devserver import split_address, ui_port
from tarry.cli.local import use_tour_config
from tarry.cli.processes import HOST, free_port
from tarry.temporal.entrypoint import settings_or_exit

__all__ = ["CONFIG_FILE", "KEY_FILE", "SERVER", "serve_oauth_tour"]

SERVER = "tickets"
"""The MCP server's name in the tour's config: its tools are `tickets__*`."""
CONFIG_FILE = "oauth-tour.toml"
KEY_FILE = "oauth-tour.key"
TOKEN_LIFETIME = timedelta(days=1)
"""How long the authorization server's access tokens live: the service token the worker
lists tools with lasts a day of touring."""


def serve_oauth_tour(data_dir: Path) -> Coroutine[Any, Any, int]:
    """`serve_dev` with the tour's servers up beside it, and its config and key in use."""
    try:  # the worker's MCP client needs them too
        import mcp.server.auth  # noqa: F401
        import oidc_provider_mock  # noqa: F401
    except ModuleNotFoundError as e:
        fail(f"--tour oauth needs its extra ({e.name} is missing): pip install 'tarry[oauth-tour]'")
    data_dir = data_dir.resolve()
    stack = settings_or_exit()  # the stack's own ports, which the MCP server must leave free
    use_tour_config("oauth", data_dir / CONFIG_FILE)
    data_dir.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("TARRY_CONNECTIONS_KEY", _key(data_dir / KEY_FILE))
    port = free_port(
        [stack.tarry_api_port, ui_port(stack), split_address(stack.temporal_address)[1]]
    )
    return _serve(data_dir, port)


async def _serve(data_dir: Path, port: int) -> int:
    from tarry.api import ApiServer
    from tarry.cli.devstack import serve_dev
    from tarry.testing import oauth_servers

    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # not a line a request
    with oauth_servers.authorization_server(TOKEN_LIFETIME) as issuer:
        tickets = oauth_servers.mcp_server(port, issuer).streamable_http_app()
        async with ApiServer(tickets, HOST, port) as served:
            url = f"{served.url}/mcp"
            config = _config(url, await oauth_servers.service_token(issuer))
            await asyncio.to_thread((data_dir / CONFIG_FILE).write_text, config)
            print(f"Auth       {issuer} (a local OpenID provider: sign in as anyone)", flush=True)
            print(f"MCP        {SERVER} at {url}: it acts as whoever connected", flush=True)
            print(f"Key        TARRY_CONNECTIONS_KEY in {data_dir / KEY_FILE}", flush=True)
            return await serve_dev(settings_or_exit(), data_dir, "oauth")


def _key(path: Path) -> str:
    """The tour's connections key, made the first time."""
    if not path.exists():
        path.write_text(Fernet.generate_key().decode())
        path.chmod(0o600)
    return path.read_text().strip()


def _config(url: str, service_token: str) -> str:
    return f"""\
# The OAuth tour's config (`tarry dev --tour oauth` writes it as it starts): the MCP server
# `{SERVER}` acts as the person whose grant a call carries, the run's owner's, as
# docs/guides/acting-as-a-person.md configures a server.
[mcp_servers.{SERVER}]
url = "{url}"
auth = "oauth"
token = "owner"
# What the worker lists the server's tools with when a run starts: a service identity.
headers = {{ Authorization = "Bearer {service_token}" }}
"""
