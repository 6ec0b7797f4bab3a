"""Sign-in through the company's identity provider (`[api.oidc]`) and a sign-in gateway
(`[api] trusted_proxy`): bearer JWTs signed by keys made here and published as a JWKS
(with its discovery document) over real local HTTP, and a gateway told from anyone else
by the address it connects from (`127.0.0.2` here; every other request comes from
`127.0.0.1`)."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import httpx2
import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.asymmetric.rsa import RSAPrivateKey
from jwt.algorithms import ECAlgorithm, RSAAlgorithm
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webdriver import WebDriver
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from tarry.api import ApiServer, create_app
from tarry.api.oidc import DISCOVERY_PATH
from tarry.cli.processes import free_port
from tarry.config.settings import load_settings
from tarry.contracts import ErrorCode, RunInput
from tarry.core.identities import Caller
from tarry.testing.scripted_model import say
from tests.browser import needs_chromium
from tests.cli import agent_env
from tests.conftest import Agent
from tests.deadline import TIMEOUT, deadline
from tests.faults import wait_until
from tests.http_api import Api
from tests.test_config_errors import refused, start
from tests.test_http_api import error_of, gated
from tests.test_http_api_people import BOB, as_, transcript
from tests.test_inbox import WAITING, first, open_run, texts, until
from tests.test_inbox import browser as browser  # the fixture
from tests.test_mcp_server import TARRY, use

AUDIENCE = "tarry"
GATEWAY = "127.0.0.2"
"""The sign-in gateway's address: a loopback address of its own, so the API tells it from
the tests' other requests (127.0.0.1)."""


class IdentityProvider:
    """An OpenID provider as far as an API sees one: a discovery document and the keys
    (JWKS) it publishes, served over HTTP, and tokens signed with its keys."""

    def __init__(self) -> None:
        self.keys: dict[str, RSAPrivateKey] = {}
        self.ec_keys: dict[str, ec.EllipticCurvePrivateKey] = {}
        """Published P-256 keys, beside the RSA ones, the provider signs nothing with."""
        self.published: list[str] = []
        self.key_fetches = 0
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"

    def new_key(self, kid: str, *, publish: bool = True) -> None:
        self.keys[kid] = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        if publish:
            self.published.append(kid)

    def new_ec_key(self, kid: str) -> None:
        self.ec_keys[kid] = ec.generate_private_key(ec.SECP256R1())

    def rotate(self, kid: str) -> None:
        """Publishes a new key `kid` in place of every older one."""
        self.published.clear()
        self.new_key(kid)

    def claims(self, **overrides: Any) -> dict[str, Any]:
        now = int(time.time())
        claims = {"iss": self.url, "aud": AUDIENCE, "sub": "alice", "groups": ["ops"]}
        return claims | {"iat": now, "exp": now + 300} | overrides

    def token(self, kid: str = "k1", **overrides: Any) -> str:
        return jwt.encode(
            self.claims(**overrides), self.keys[kid], algorithm="RS256", headers={"kid": kid}
        )

    def public_pem(self, kid: str = "k1") -> bytes:
        return (
            self.keys[kid]
            .public_key()
            .public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )

    def _jwks(self) -> dict[str, Any]:
        keys = []
        for kid in self.published:
            jwk = json.loads(RSAAlgorithm.to_jwk(self.keys[kid].public_key()))
            keys.append(jwk | {"kid": kid, "use": "sig", "alg": "RS256"})
        for kid, key in self.ec_keys.items():
            jwk = json.loads(ECAlgorithm.to_jwk(key.public_key()))
            keys.append(jwk | {"kid": kid, "use": "sig", "alg": "ES256"})
        return {"keys": keys}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        provider = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path == DISCOVERY_PATH:
                    body = {"issuer": provider.url, "jwks_uri": provider.url + "/jwks"}
                elif self.path == "/jwks":
                    provider.key_fetches += 1
                    body = provider._jwks()
                else:
                    self.send_error(404)
                    return
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *_: Any) -> None:
                pass

        return Handler

    def __enter__(self) -> IdentityProvider:
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *_: object) -> None:
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture
def provider() -> Iterator[IdentityProvider]:
    with IdentityProvider() as provider:
        provider.new_key("k1")
        yield provider


@asynccontextmanager
async def api_with(
    agent: Agent, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, config: str
) -> AsyncIterator[str]:
    """The API of the config file `config` (and bob's static token), served; its URL."""
    path = tmp_path / "tarry.toml"
    path.write_text(f'{config}\n[api.users]\nbob = "{BOB}"\n')
    monkeypatch.setenv("TARRY_CONFIG", str(path))
    async with ApiServer(create_app(agent.tarry, load_settings()), "127.0.0.1", 0) as server:
        yield server.url


def oidc_config(provider: IdentityProvider, **keys: Any) -> str:
    table = {"issuer": provider.url, "audience": AUDIENCE} | keys
    return "[api.oidc]\n" + "".join(
        f"{key} = {json.dumps(value)}\n" for key, value in table.items()
    )


@asynccontextmanager
async def client(url: str, *, local_address: str = "127.0.0.1") -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.AsyncHTTPTransport(local_address=local_address)
    timeout = httpx.Timeout(deadline(60), connect=deadline(5))
    async with httpx.AsyncClient(base_url=url, transport=transport, timeout=timeout) as http:
        yield http


@pytest.fixture
async def oidc_api(
    agent: Agent, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, provider: IdentityProvider
) -> AsyncIterator[httpx.AsyncClient]:
    """The API with `provider` as its identity provider, found by its discovery document;
    keys fetched again at once for an unknown `kid`."""
    config = oidc_config(provider, jwks_cooldown=0)
    async with api_with(agent, tmp_path, monkeypatch, config) as url, client(url) as http:
        yield http


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unsigned(provider: IdentityProvider) -> str:
    header = b64(json.dumps({"alg": "none", "typ": "JWT", "kid": "k1"}).encode())
    return f"{header}.{b64(json.dumps(provider.claims()).encode())}."


def hmac_with_the_public_key(provider: IdentityProvider) -> str:
    """The classic confusion: HS256 "verified with the provider's key" takes the public
    key, which anyone has, as the shared secret."""
    header = b64(json.dumps({"alg": "HS256", "typ": "JWT", "kid": "k1"}).encode())
    signed = f"{header}.{b64(json.dumps(provider.claims()).encode())}"
    mac = hmac.new(provider.public_pem(), signed.encode(), hashlib.sha256).digest()
    return f"{signed}.{b64(mac)}"


def tampered(provider: IdentityProvider) -> str:
    """A good token whose payload now names another user, its signature kept."""
    header, _, signature = provider.token().split(".")
    payload = b64(json.dumps(provider.claims(sub="mallory")).encode())
    return f"{header}.{payload}.{signature}"


def of_an_unpublished_key(provider: IdentityProvider) -> str:
    provider.new_key("k-unpublished", publish=False)
    return provider.token("k-unpublished")


def ec_signed_for_an_rsa_key(provider: IdentityProvider) -> str:
    """ES256 naming the provider's RSA key: an algorithm of the allow-list that does not
    fit the key it names."""
    forgers_key = ec.generate_private_key(ec.SECP256R1())
    return jwt.encode(provider.claims(), forgers_key, algorithm="ES256", headers={"kid": "k1"})


def rsa_signed_for_an_ec_key(provider: IdentityProvider) -> str:
    """RS256 naming an EC key the provider publishes."""
    provider.new_ec_key("e1")
    forgers_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return jwt.encode(provider.claims(), forgers_key, algorithm="RS256", headers={"kid": "e1"})


FORGERIES: dict[str, tuple[Callable[[IdentityProvider], str], ErrorCode]] = {
    "expired": (lambda p: p.token(exp=int(time.time()) - 3600), ErrorCode.TOKEN_EXPIRED),
    "not yet valid": (lambda p: p.token(nbf=int(time.time()) + 3600),
                      ErrorCode.TOKEN_NOT_YET_VALID),
    "wrong audience": (lambda p: p.token(aud="another-app"), ErrorCode.TOKEN_WRONG_AUDIENCE),
    "wrong issuer": (lambda p: p.token(iss="https://elsewhere.example"),
                     ErrorCode.TOKEN_WRONG_ISSUER),
    "unknown kid": (of_an_unpublished_key, ErrorCode.TOKEN_UNKNOWN_KEY),
    "alg none": (unsigned, ErrorCode.TOKEN_ALGORITHM_REFUSED),
    "HS256 with the public key": (hmac_with_the_public_key, ErrorCode.TOKEN_ALGORITHM_REFUSED),
    "ES256 on an RSA key": (ec_signed_for_an_rsa_key, ErrorCode.TOKEN_INVALID),
    "RS256 on an EC key": (rsa_signed_for_an_ec_key, ErrorCode.TOKEN_INVALID),
    "tampered payload": (tampered, ErrorCode.TOKEN_INVALID),
    "not a JWT": (lambda p: "a.b.c", ErrorCode.TOKEN_INVALID),
}  # fmt: skip


async def test_a_jwt_of_the_identity_provider_signs_in_its_user_with_their_groups(
    agent: Agent, oidc_api: httpx.AsyncClient, provider: IdentityProvider
) -> None:
    api = Api(oidc_api, agent, str(oidc_api.base_url))
    oidc_api.headers.update(as_(provider.token()))

    run_id = await gated(api, approvers={"write_file": ["ops"]})

    # Unmapped by `[api.oidc.users]`: the provider's `alice`, never the config's.
    assert [m.get("by") for m in await transcript(api, run_id)][:1] == ["oidc:alice"]
    state = (await oidc_api.get(f"/v1/runs/{run_id}")).json()
    assert [p["may_decide"] for p in state["pending_approvals"]] == [True]  # alice is in ops


@pytest.mark.parametrize("forgery", FORGERIES)
async def test_a_bad_jwt_is_401_with_a_code_that_says_what_is_wrong(
    oidc_api: httpx.AsyncClient, provider: IdentityProvider, forgery: str
) -> None:
    forge, code = FORGERIES[forgery]

    response = await oidc_api.get("/v1/runs", headers=as_(forge(provider)))

    assert response.status_code == 401, response.text
    assert response.json()["error"]["code"] == code
    assert response.headers["WWW-Authenticate"] == "Bearer"


async def test_static_tokens_keep_working_beside_the_identity_provider(
    oidc_api: httpx.AsyncClient, provider: IdentityProvider
) -> None:
    answers = [
        (await oidc_api.get("/v1/runs", headers=as_(token))).status_code
        for token in (BOB, provider.token(), "guessed")
    ]
    refused = await oidc_api.get("/v1/runs", headers=as_("guessed"))

    assert answers == [200, 200, 401]
    assert refused.json()["error"] == {
        "code": ErrorCode.UNAUTHORIZED,
        "message": f"the token is not one of the config file's [api.users] nor a JWT of"
        f" {provider.url}",
    }


async def test_a_rotated_key_is_accepted_without_a_restart_and_the_retired_one_refused(
    oidc_api: httpx.AsyncClient, provider: IdentityProvider
) -> None:
    before = await oidc_api.get("/v1/runs", headers=as_(provider.token("k1")))
    provider.rotate("k2")

    rotated = await oidc_api.get("/v1/runs", headers=as_(provider.token("k2")))
    retired = await oidc_api.get("/v1/runs", headers=as_(provider.token("k1")))

    assert (before.status_code, rotated.status_code) == (200, 200)
    assert retired.status_code == 401
    assert retired.json()["error"]["code"] == ErrorCode.TOKEN_UNKNOWN_KEY


async def test_tokens_naming_made_up_keys_do_not_make_the_api_fetch_the_keys_each_time(
    agent: Agent, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, provider: IdentityProvider
) -> None:
    provider.new_key("made-up", publish=False)
    config = oidc_config(provider)  # the default cooldown between fetches for unknown kids
    async with api_with(agent, tmp_path, monkeypatch, config) as url, client(url) as http:
        answers = [
            (await http.get("/v1/runs", headers=as_(provider.token("made-up")))).status_code
            for _ in range(5)
        ]

    assert answers == [401] * 5
    assert provider.key_fetches == 1


@pytest.mark.parametrize("keys", ["unreachable", "none published"])
async def test_an_identity_provider_without_keys_to_check_with_is_503_not_a_refusal(
    agent: Agent,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    provider: IdentityProvider,
    keys: str,
) -> None:
    if keys == "unreachable":
        config = oidc_config(provider, jwks_url=provider.url + "/no-keys-here")
    else:
        provider.published.clear()
        config = oidc_config(provider)
    async with api_with(agent, tmp_path, monkeypatch, config) as url, client(url) as http:
        response = await http.get("/v1/runs", headers=as_(provider.token()))

    assert response.status_code == 503
    assert response.json()["error"]["code"] == ErrorCode.IDENTITY_PROVIDER_UNAVAILABLE


class DownIssuer:
    """An issuer that is down: it takes each request, counts it, and holds it until
    `answer()` (at most a deadline), then answers 503, so a discovery can be caught
    while it waits."""

    def __init__(self) -> None:
        self.requests = 0
        self.asked = threading.Event()
        self._answer = threading.Event()
        issuer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                issuer.requests += 1
                issuer.asked.set()
                issuer._answer.wait(deadline(60))
                self.send_error(503)

            def log_message(self, *_: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"

    def answer(self) -> None:
        """Answers every request held, and any later one at once."""
        self._answer.set()

    def __enter__(self) -> DownIssuer:
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *_: object) -> None:
        self.answer()
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture
def down_issuer() -> Iterator[DownIssuer]:
    with DownIssuer() as issuer:
        yield issuer


def down_issuer_config(issuer: DownIssuer, provider: IdentityProvider) -> str:
    """`[api.oidc]` of `issuer`, which would take `provider`'s tokens if it were up."""
    # The most the setting takes, at any deadline scale: the hang outlasts the tests' waits.
    return oidc_config(provider, discovery_cooldown=3600, fetch_timeout=60).replace(
        json.dumps(provider.url), json.dumps(issuer.url)
    )


async def test_a_static_token_answers_while_the_identity_provider_s_discovery_hangs(
    agent: Agent,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    provider: IdentityProvider,
    down_issuer: DownIssuer,
) -> None:
    config = down_issuer_config(down_issuer, provider)
    async with api_with(agent, tmp_path, monkeypatch, config) as url, client(url) as http:
        jwt_requests = [
            asyncio.create_task(
                http.get("/v1/runs", headers=as_(provider.token(iss=down_issuer.url)))
            )
            for _ in range(8)
        ]
        await asyncio.to_thread(down_issuer.asked.wait, deadline(30))

        static = await http.get("/v1/runs", headers=as_(BOB))
        still_waiting = not any(request.done() for request in jwt_requests)
        down_issuer.answer()
        jwts = await asyncio.gather(*jwt_requests)

    assert static.status_code == 200
    assert still_waiting  # the static token answered while the discovery was held open
    assert {error_of(r) for r in jwts} == {(503, ErrorCode.IDENTITY_PROVIDER_UNAVAILABLE)}


async def test_a_failed_discovery_is_not_asked_again_within_the_cooldown(
    agent: Agent,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    provider: IdentityProvider,
    down_issuer: DownIssuer,
) -> None:
    down_issuer.answer()  # down, and saying so at once
    config = down_issuer_config(down_issuer, provider)
    async with api_with(agent, tmp_path, monkeypatch, config) as url, client(url) as http:
        answers = [
            error_of(await http.get("/v1/runs", headers=as_(provider.token(iss=down_issuer.url))))
            for _ in range(3)
        ]

    assert answers == [(503, ErrorCode.IDENTITY_PROVIDER_UNAVAILABLE)] * 3
    assert down_issuer.requests == 1


# --- The sign-in gateway ----------------------------------------------------------

GATEWAY_CONFIG = f"""
[api]
trusted_proxy = ["{GATEWAY}"]
forwarded_user_header = "X-Auth-Request-User"
forwarded_groups_header = "X-Auth-Request-Groups"
"""
"""A gateway, with the headers oauth2-proxy sends (`--set-xauthrequest`)."""
FORWARDED = {"X-Auth-Request-User": "alice", "X-Auth-Request-Groups": "ops,dev"}


@pytest.fixture
async def gateway_api(
    agent: Agent, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[str]:
    async with api_with(agent, tmp_path, monkeypatch, GATEWAY_CONFIG) as url:
        yield url


async def test_the_trusted_gateway_s_forwarded_user_is_who_the_request_is(
    agent: Agent, gateway_api: str
) -> None:
    async with client(gateway_api, local_address=GATEWAY) as http:
        http.headers.update(FORWARDED)
        api = Api(http, agent, gateway_api)
        run_id = await gated(api, approvers={"write_file": ["dev"]})

        state = (await http.get(f"/v1/runs/{run_id}")).json()
        messages = await transcript(api, run_id)

    assert [m.get("by") for m in messages][:1] == ["alice"]
    assert [p["may_decide"] for p in state["pending_approvals"]] == [True]  # alice is in dev


async def test_forwarded_user_headers_from_any_other_address_are_ignored(gateway_api: str) -> None:
    # Nor does a claim of the gateway's address make a request the gateway's.
    forged = FORWARDED | {"X-Forwarded-For": GATEWAY, "X-Real-IP": GATEWAY}
    async with client(gateway_api) as http:
        response = await http.get("/v1/runs", headers=forged)
        bob = await http.get("/v1/runs", headers=forged | as_(BOB))

    assert response.status_code == 401
    assert response.json()["error"]["code"] == ErrorCode.UNAUTHORIZED
    assert bob.status_code == 200  # a token still signs in from anywhere


async def test_the_gateway_s_user_wins_over_a_token_it_passes_on_and_without_one_a_token_signs_in(
    gateway_api: str,
) -> None:
    async with client(gateway_api, local_address=GATEWAY) as http:
        passed_on = await http.get("/v1/runs", headers=FORWARDED | as_("an.id-token.of-the-sso"))
        by_token = await http.get("/v1/runs", headers=as_(BOB))

    assert (passed_on.status_code, by_token.status_code) == (200, 200)


async def test_the_gateway_naming_no_user_is_401(gateway_api: str) -> None:
    async with client(gateway_api, local_address=GATEWAY) as http:
        response = await http.get("/v1/runs")

    assert response.status_code == 401
    assert response.json()["error"] == {
        "code": ErrorCode.UNAUTHORIZED,
        "message": "the sign-in gateway sent no X-Auth-Request-User header",
    }


# --- Configuration mistakes -------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "problem"),
    [
        ('[api.oidc]\naudience = "tarry"\n', "[api.oidc] issuer: Field required"),
        ('[api.oidc]\nissuer = "https://id.example"\naudience = "tarry"\nalgorithms = ["HS256"]\n',
         "[api.oidc] algorithms: HS256: not a public-key signature; an identity provider's"
         " tokens are checked against its published keys with RS256, RS384, RS512, PS256,"
         " PS384, PS512, ES256, ES384, ES512"),
        ('[api]\ntrusted_proxy = ["gateway.example"]\n',
         "[api] trusted_proxy: value is not a valid IPv4 or IPv6 network"),
    ],
    ids=["oidc without issuer", "hs256 allowed", "proxy by name"],
)  # fmt: skip
async def test_a_sign_in_configuration_mistake_is_one_line_and_exit_2(
    config: str, problem: str, tmp_path: Path
) -> None:
    line = refused(await start("tarry serve", tmp_path, config))

    assert line == f"{tmp_path / 'tarry.toml'}: {problem}"


# --- `tarry mcp --http` -----------------------------------------------------------


@asynccontextmanager
async def tarry_mcp_http(
    agent: Agent, payload_store: Path, tmp_path: Path, config: str, **more_env: str
) -> AsyncIterator[str]:
    """`tarry mcp --http PORT` with the config file `config` and `more_env`, serving; its
    endpoint."""
    (tmp_path / "tarry.toml").write_text(config)
    env = agent_env(agent) | {
        "TARRY_STORAGE_DIR": str(payload_store),
        "TARRY_CONFIG": str(tmp_path / "tarry.toml"),
        **more_env,
    }
    port = free_port()
    process = await asyncio.create_subprocess_exec(
        str(TARRY), "mcp", "--http", str(port), env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert process.stdout is not None
    assert process.stderr is not None
    try:
        ready = await asyncio.wait_for(process.stdout.readline(), deadline(30))
        assert b"/mcp" in ready, await process.stderr.read()
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        await process.wait()


INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "test", "version": "1"},
    },
}
MCP_HEADERS = {"Accept": "application/json, text/event-stream"}


async def test_tarry_mcp_over_http_takes_the_api_s_tokens_and_jwts_and_refuses_others(
    agent: Agent, payload_store: Path, tmp_path: Path, provider: IdentityProvider
) -> None:
    agent.model.add(say("Hello."))
    config = oidc_config(provider) + f'\n[api.users]\nbob = "{BOB}"\n'
    async with tarry_mcp_http(agent, payload_store, tmp_path, config) as url:
        async with client(url) as http:
            answers = {
                name: await http.post(url, json=INITIALIZE, headers=MCP_HEADERS | extra)
                for name, extra in (
                    ("none", {}),
                    ("guessed", as_("guessed")),
                    ("expired", as_(provider.token(exp=int(time.time()) - 3600))),
                    ("bob", as_(BOB)),
                )
            }
        signed_in = httpx2.AsyncClient(
            headers=as_(provider.token()), timeout=httpx2.Timeout(deadline(60))
        )
        async with signed_in, Client(streamable_http_client(url, http_client=signed_in)) as mcp:
            started = await use(mcp, "start_run", prompt="hi")
            messages = await use(mcp, "run_transcript", run_id=started["run_id"])

    codes = {name: (r.status_code, r.json()["error"]["code"]) for name, r in answers.items()
             if name != "bob"}  # fmt: skip
    assert codes == {
        "none": (401, ErrorCode.UNAUTHORIZED),
        "guessed": (401, ErrorCode.UNAUTHORIZED),
        "expired": (401, ErrorCode.TOKEN_EXPIRED),
    }
    assert answers["bob"].status_code == 200
    assert [m.get("by") for m in messages][:1] == ["oidc:alice"]  # the JWT's user started it


# --- The inbox behind a sign-in gateway, in a real browser ------------------------

_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "upgrade"}


@asynccontextmanager
async def sign_in_gateway(upstream: str, forwarded: dict[str, str]) -> AsyncIterator[str]:
    """A sign-in gateway as the API sees one (oauth2-proxy once its user has logged in):
    a reverse proxy connecting from `GATEWAY` that passes the browser's `Host` and adds
    the `forwarded` headers in place of any the browser sent. Streams both ways, as the
    inbox's event streams need. Its URL."""
    own = {name.lower() for name in forwarded}
    transport = httpx.AsyncHTTPTransport(local_address=GATEWAY)

    async def proxy(request: Request) -> Response:
        headers = [
            (name, value)
            for name, value in request.headers.items()
            if name not in own and name not in _HOP_BY_HOP
        ] + list(forwarded.items())
        sent = upstream_http.build_request(
            request.method,
            request.url.path,
            params=request.query_params,
            headers=headers,
            content=await request.body(),
        )
        answer = await upstream_http.send(sent, stream=True)
        return StreamingResponse(
            answer.aiter_raw(),
            status_code=answer.status_code,
            headers={k: v for k, v in answer.headers.items() if k not in _HOP_BY_HOP},
            background=BackgroundTask(answer.aclose),
        )

    methods = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]
    app = Starlette(routes=[Route("/{path:path}", proxy, methods=methods)])
    async with (
        httpx.AsyncClient(base_url=upstream, transport=transport, timeout=None) as upstream_http,
        ApiServer(app, "127.0.0.1", 0) as server,
    ):
        yield server.url


@needs_chromium
async def test_behind_a_sign_in_gateway_the_inbox_is_the_forwarded_user_s(
    agent: Agent, gateway_api: str, browser: WebDriver
) -> None:
    agent.model.add(say("Hello."), say("You are welcome."))
    async with sign_in_gateway(gateway_api, FORWARDED) as gateway, client(gateway) as http:
        api = Api(http, agent, gateway)
        run_id = await api.start("hi")
        await api.run(run_id).wait_for(WAITING, TIMEOUT)

        await open_run(browser, api, run_id)
        box = browser.find_element(By.ID, "reply-text")
        await asyncio.to_thread(box.send_keys, "thanks", Keys.ENTER)

        await until(lambda: "You are welcome." in texts(browser, ".message.assistant .body"),
                    "the answer to the reply")  # fmt: skip
        who = browser.execute_script(
            "return [...document.querySelectorAll('.message.user .who')].map(e => e.textContent)"
        )
        asked_for_a_token = first(browser, "#token-dialog[open]")

    assert who == ["alice", "alice"]  # the start, through the gateway, and the inbox's reply
    assert asked_for_a_token is None


async def test_any_host_with_a_gateway_is_refused_even_with_tokens(tmp_path: Path) -> None:
    """A page under a rebound name on the gateway's machine could send its headers.
    (`Origin: null` is refused with or without a gateway: `test_config_errors`.)"""
    config = f'[api]\ntrusted_proxy = ["{GATEWAY}"]\ntokens = ["{BOB}"]\n'

    line = refused(await start("tarry serve", tmp_path, config, TARRY_API_ALLOWED_HOSTS="*"))

    assert line == (
        "TARRY_API_ALLOWED_HOSTS=* with the config's [api] trusted_proxy lets a page whose"
        " name resolves to the gateway's machine send the gateway's headers; name the hosts"
    )


async def test_tarry_mcp_over_http_keeps_one_user_s_private_run_from_another(
    agent: Agent, payload_store: Path, tmp_path: Path, provider: IdentityProvider
) -> None:
    agent.model.add(say("Hello."))
    config = oidc_config(provider) + f'\n[api.users]\nbob = "{BOB}"\n'
    async with tarry_mcp_http(agent, payload_store, tmp_path, config) as url:
        as_alice = httpx2.AsyncClient(
            headers=as_(provider.token()), timeout=httpx2.Timeout(deadline(60))
        )
        async with as_alice, Client(streamable_http_client(url, http_client=as_alice)) as mcp:
            run_id = (await use(mcp, "start_run", prompt="hi"))["run_id"]
            alices_list = await use(mcp, "list_runs")
        as_bob = httpx2.AsyncClient(headers=as_(BOB), timeout=httpx2.Timeout(deadline(60)))
        async with as_bob, Client(streamable_http_client(url, http_client=as_bob)) as mcp:
            state = await mcp.call_tool("run_state", {"run_id": run_id})
            reply = await mcp.call_tool("reply", {"run_id": run_id, "text": "mine now"})
            bobs_list = await use(mcp, "list_runs")

    assert run_id in [row["run_id"] for row in alices_list]
    for answer in (state, reply):
        assert answer.is_error
        assert answer.structured_content is not None
        assert answer.structured_content["code"] == ErrorCode.RUN_NOT_FOUND
    assert run_id not in [row["run_id"] for row in bobs_list]


async def test_tarry_mcp_over_http_lists_a_user_s_private_schedule_to_them_alone(
    agent: Agent, payload_store: Path, tmp_path: Path, provider: IdentityProvider
) -> None:
    name = f"alices-digest-{uuid.uuid4().hex[:6]}"
    alice = agent.tarry.acting_as(Caller("oidc:alice"))  # the JWT's user
    await alice.create_schedule(name, RunInput(prompt="Check the inbox"), every="1h")
    config = oidc_config(provider) + f'\n[api.users]\nbob = "{BOB}"\n'
    try:
        async with tarry_mcp_http(agent, payload_store, tmp_path, config) as url:

            async def listed(token: str) -> list[str]:
                as_user = httpx2.AsyncClient(
                    headers=as_(token), timeout=httpx2.Timeout(deadline(60))
                )
                async with as_user, Client(streamable_http_client(url, http_client=as_user)) as m:
                    return [s["name"] for s in await use(m, "list_schedules")]

            async def alice_lists_it() -> bool:
                return name in await listed(provider.token())

            # Visibility lists a new schedule a moment after its creation.
            await wait_until(alice_lists_it, what="alice's schedule listed")
            bobs = await listed(BOB)
    finally:
        await alice.schedule(name).delete()

    assert name not in bobs
