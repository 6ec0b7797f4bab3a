"""Which pages may reach the HTTP API: loopback means this machine, not any page
in its browser. Over real HTTP against a served API: a `Host` that is not this machine's
(DNS rebinding) is 421 on every route, a state-changing request from another page's
`Origin` is 403 and changes nothing, and every answer forbids framing and sniffing."""

from __future__ import annotations

import re

import httpx
import pytest
from pydantic import ValidationError
from temporalio.api.enums.v1 import EventType

from tarry.api import ApiServer, ApiSetupError, check_exposure, create_app
from tarry.config.settings import TarrySettings
from tarry.contracts import ErrorCode, Phase
from tarry.testing.scripted_model import say
from tests.conftest import Agent
from tests.deadline import TIMEOUT
from tests.http_api import TOKEN, Api, serving
from tests.test_http_api_auth import routes

WAITING = {Phase.WAITING_USER}
SECURITY_HEADERS = {
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    "referrer-policy": "same-origin",
}


def port_of(api: Api) -> int:
    port = httpx.URL(api.url).port
    assert port is not None
    return port


def error_of(response: httpx.Response) -> tuple[int, str, str]:
    body = response.json()
    assert set(body) == {"error"}
    return response.status_code, body["error"]["code"], body["error"]["message"]


async def signals(agent: Agent, run_id: str) -> list[str]:
    """The names of the signals the run's history received, in order."""
    history = await agent.tarry.client.get_workflow_handle(run_id).fetch_history()
    return [
        e.workflow_execution_signaled_event_attributes.signal_name
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
    ]


# --- Host: DNS rebinding ------------------------------------------------------------------


async def test_a_foreign_host_is_421_on_every_route_and_the_inbox(api: Api) -> None:
    api.agent.model.add(say("What now?"))
    run_id = await api.start("hello")
    await api.run(run_id).wait_for(WAITING, TIMEOUT)
    evil = {"Host": f"evil.example:{port_of(api)}"}
    requests = [
        *((method, path.replace("run-x", run_id)) for method, path in routes()),
        ("GET", "/"),
        ("GET", "/inbox.js"),
    ]

    answers = {
        (method, path): await api.http.request(
            method, path, headers=evil, json={"id": "run-rebound", "prompt": "hi"}
        )
        for method, path in requests
    }

    assert ("POST", "/v1/runs") in answers
    assert ("GET", f"/v1/runs/{run_id}/events") in answers
    for route, response in answers.items():
        if route == ("GET", "/healthz"):
            continue
        status, code, message = error_of(response)
        assert (status, code) == (421, "MISDIRECTED_REQUEST"), route
        assert "TARRY_API_ALLOWED_HOSTS" in message
    never_started = await api.http.get("/v1/runs/run-rebound")
    assert error_of(never_started)[:2] == (404, ErrorCode.RUN_NOT_FOUND)
    assert await signals(api.agent, run_id) == []


async def test_healthz_answers_any_host_for_probes_by_address(api: Api) -> None:
    response = await api.http.get("/healthz", headers={"Host": "10.1.2.3:8234"})

    assert response.json() == {"temporal": "reachable"}


async def test_loopback_names_and_addresses_are_served(api: Api) -> None:
    port = port_of(api)

    answers = [
        (await api.http.get(path, headers={"Host": f"{host}:{port}"})).status_code
        for host in ("localhost", "127.0.0.1", "[::1]", "LOCALHOST")
        for path in ("/v1/runs", "/")
    ]

    assert answers == [200] * 8


async def test_with_tokens_a_proxy_s_host_is_421_until_allowed_hosts_names_it(
    agent: Agent,
) -> None:
    agent.model.add(say("Behind the proxy."))
    proxied = {"Host": "tarry.example", "Origin": "https://tarry.example"}
    async with serving(agent, TOKEN) as closed:
        refused = await closed.http.get("/v1/runs", headers=proxied)
    async with serving(agent, TOKEN, allowed_hosts=("tarry.example",)) as widened:
        listed = await widened.http.get("/v1/runs", headers=proxied)
        started = await widened.http.post("/v1/runs", headers=proxied, json={"prompt": "hi"})
        other = await widened.http.get("/v1/runs", headers={"Host": "other.example"})
    async with serving(agent, TOKEN, allowed_hosts=("*",)) as anything:
        any_host = await anything.http.get("/v1/runs", headers={"Host": "other.example:9"})

    assert error_of(refused)[:2] == (421, "MISDIRECTED_REQUEST")
    assert (listed.status_code, started.status_code) == (200, 201), started.text
    widened.run(started.json()["id"])
    assert error_of(other)[:2] == (421, "MISDIRECTED_REQUEST")
    assert any_host.status_code == 200


async def test_allowed_hosts_come_from_the_environment_a_name_alone_on_any_port(
    agent: Agent, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TARRY_API_ALLOWED_HOSTS", "tarry.example, other.example:8443")
    settings = TarrySettings()

    async with (
        ApiServer(create_app(agent.tarry, settings), "127.0.0.1", 0) as server,
        httpx.AsyncClient(base_url=server.url) as http,
    ):
        answers = {
            host: (await http.get("/v1/runs", headers={"Host": host})).status_code
            for host in ("tarry.example", "tarry.example:9", "other.example:8443", "other.example")
        }

    assert answers == {
        "tarry.example": 200,
        "tarry.example:9": 200,
        "other.example:8443": 200,
        "other.example": 421,
    }


def test_any_host_without_tokens_is_refused_by_the_settings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TARRY_API_ALLOWED_HOSTS", "*")

    with pytest.raises(ValidationError, match="TARRY_API_ALLOWED_HOSTS=\\* lets any web page"):
        TarrySettings()
    monkeypatch.setenv("TARRY_API_TOKENS", TOKEN)
    assert TarrySettings().tarry_api_allowed_hosts == ["*"]


def test_an_allowed_host_that_is_no_host_refuses_to_serve_saying_what_to_give() -> None:
    settings = TarrySettings.model_construct(tarry_api_allowed_hosts=["https://tarry.example/"])

    expected = "'https://tarry.example/' is not a host; give NAME or NAME:PORT"
    with pytest.raises(ApiSetupError, match=re.escape(expected)):
        check_exposure("127.0.0.1", settings)


# --- Origin: cross-site requests --------------------------------------------------------


@pytest.mark.parametrize("origin", ["http://evil.example", "null"])
async def test_cross_site_text_and_form_posts_to_stop_and_pause_change_nothing(
    api: Api, origin: str
) -> None:
    api.agent.model.add(say("Shall I go on?"))
    run_id = await api.start("hello")
    await api.run(run_id).wait_for(WAITING, TIMEOUT)
    form_data = b'--x\r\nContent-Disposition: form-data; name="reason"\r\n\r\nforged\r\n--x--\r\n'
    bodies = [
        ("text/plain", b'{"reason": "forged"}'),
        ("application/x-www-form-urlencoded", b"reason=forged"),
        ("multipart/form-data; boundary=x", form_data),
    ]

    before = (await api.http.get(f"/v1/runs/{run_id}")).json()

    refusals = [
        await api.http.post(
            f"/v1/runs/{run_id}/{action}",
            content=body,
            headers={"Origin": origin, "Content-Type": kind},
        )
        for action in ("stop", "pause")
        for kind, body in bodies
    ]
    after = (await api.http.get(f"/v1/runs/{run_id}")).json()
    own = await api.http.post(
        f"/v1/runs/{run_id}/stop", json={"reason": "from the inbox"}, headers={"Origin": api.url}
    )

    for response in refusals:
        status, code, message = error_of(response)
        assert (status, code) == (403, "FORBIDDEN")
        assert "TARRY_API_CORS_ORIGINS" in message
    assert after == before
    assert own.status_code == 202, own.text
    result = await api.run(run_id).result()
    assert (result.phase, result.stop_reason) == (Phase.COMPLETED, "from the inbox")
    assert await signals(api.agent, run_id) == ["stop"]


async def test_a_configured_cors_origin_may_post(agent: Agent) -> None:
    agent.model.add(say("Hi from the app."))
    async with serving(agent, cors_origins=("http://app.example",)) as api:
        response = await api.http.post(
            "/v1/runs", json={"prompt": "hi"}, headers={"Origin": "http://app.example"}
        )
        assert response.status_code == 201, response.text
        api.run(response.json()["id"])


async def test_a_listed_null_origin_may_not_post_even_with_a_token(agent: Agent) -> None:
    """The settings refuse `null` (tests/test_config_errors.py); the guard does not take
    it either, should a listed one reach it."""
    async with serving(agent, TOKEN, cors_origins=("null",)) as api:
        response = await api.http.post(
            "/v1/runs", json={"prompt": "hi"}, headers={"Origin": "null"}
        )

    assert error_of(response)[:2] == (403, "FORBIDDEN")
    assert agent.model.requests == []


# --- Headers ------------------------------------------------------------------------------


async def test_every_answer_forbids_framing_sniffing_and_referrers(api: Api) -> None:
    answers = {
        "inbox": await api.http.get("/"),
        "inbox script": await api.http.get("/inbox.js"),
        "list": await api.http.get("/v1/runs"),
        "error": await api.http.get("/v1/runs/run-nosuch"),
        "refusal": await api.http.get("/v1/runs", headers={"Host": "evil.example"}),
    }

    for what, response in answers.items():
        assert SECURITY_HEADERS.items() <= response.headers.items(), what
        policy = response.headers["content-security-policy"]
        assert "frame-ancestors 'none'" in policy, what
        assert "script-src 'self';" in policy, what
    assert answers["inbox"].status_code == 200
    assert 'http-equiv="Content-Security-Policy"' not in answers["inbox"].text


async def test_the_docs_page_may_run_swagger_ui_from_its_cdn_and_no_other_script(
    api: Api,
) -> None:
    response = await api.http.get("/docs")

    policy = dict(
        d.strip().split(" ", 1) for d in response.headers["content-security-policy"].split(";")
    )
    assert 'src="https://cdn.jsdelivr.net/' in response.text
    scripts = policy["script-src"].split()
    assert scripts[0] == "https://cdn.jsdelivr.net"
    assert [s.startswith("'sha256-") for s in scripts[1:]] == [True]  # its one inline script
    assert policy["frame-ancestors"] == "'none'"
    assert SECURITY_HEADERS.items() <= response.headers.items()
