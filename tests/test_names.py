"""One rule for the names of people, whichever source names them (`tarry.core.identities.
name_problem`): the config's users, groups and admins, the identity provider's JWTs and a
sign-in gateway's header. A name Tarry gives to no person (`temporal-ui`, `cli:NAME`,
`group:NAME`), a group's, one with an invisible or control character, or a long one
never signs anyone in, so no record, share or list of approvers takes one for another.
The identity provider's users are `oidc:CLAIM` unless `[api.oidc.users]` maps them.

Through the real API with the real identity provider and gateway of `tests/test_oidc.py`,
and the configuration as every entry point loads it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tarry.config.settings import ConfigError, load_settings
from tarry.contracts import ErrorCode, Phase, RunInput
from tarry.core.identities import NAME_LIMIT, Caller
from tarry.testing.scripted_model import say
from tests.cli import Cli, agent_env
from tests.conftest import Agent
from tests.deadline import TIMEOUT
from tests.http_api import Api
from tests.test_config_errors import refused, start
from tests.test_http_api import error_of, gated
from tests.test_http_api_people import BOB, as_, transcript
from tests.test_oidc import (
    GATEWAY,
    GATEWAY_CONFIG,
    IdentityProvider,
    api_with,
    client,
    oidc_config,
)
from tests.test_oidc import provider as provider  # the fixture

LONG_TOKEN = "a-token-long-enough-0123456789"

REFUSED_NAMES = {
    "the Temporal UI's": "temporal-ui",
    "the Temporal UI's, in capitals": "Temporal-UI",
    "a local user's": "cli:root",
    "a local user's, in fullwidth letters": "\uff43\uff4c\uff49:root",
    "a group's principal": "group:ops",
    "an approval rule's": "rule 1",
    "a schedule's": "schedule nightly",
    "a zero-width space's": "alice\u200b",
    "a newline's": "alice\nbob",
    "an escape sequence's": "alice\x1b[2J",
    "a long one": "a" * 300,
    "the group ops's": "ops",
}
"""Names no source may give a person."""
SENT_BY_THE_GATEWAY = {
    case: name for case, name in REFUSED_NAMES.items() if name.isascii() and name.isprintable()
} | {"the bare tokens' user's": "api"}
"""The names an HTTP header can carry (no newline, no control, ASCII), and `api`, a name
only the configuration's bare tokens give."""
NOT_MEMBERS = [c for c, name in REFUSED_NAMES.items() if not name.startswith("cli:")]
"""The cases no group may have as a member: a local user, `cli:NAME`, may be one."""
NOT_ADMINS = [c for c in NOT_MEMBERS if not REFUSED_NAMES[c].startswith("group:")]
"""The cases no admin may be: a group, `group:NAME`, may be one."""
GROUPS = '[api.groups]\nops = ["carol"]\n'


def loaded(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, config: str, tokens: str = "") -> str:
    """The one line a process loading `config` (and `TARRY_API_TOKENS=tokens`) refuses
    it with."""
    (tmp_path / "tarry.toml").write_text(config)
    monkeypatch.setenv("TARRY_CONFIG", str(tmp_path / "tarry.toml"))
    monkeypatch.setenv("TARRY_API_TOKENS", tokens)
    with pytest.raises(ConfigError) as refusal:
        load_settings()
    return str(refusal.value)


def toml(name: str) -> str:
    """`name` as a TOML basic string, each character beyond printable ASCII escaped."""
    plain = {c: c for c in name if c.isascii() and c.isprintable() and c not in '"\\'}
    return '"' + "".join(plain.get(c) or f"\\u{ord(c):04x}" for c in name) + '"'


# --- The configuration ----------------------------------------------------------------


@pytest.mark.parametrize("case", REFUSED_NAMES)
def test_a_static_user_s_name_is_held_to_the_rule(
    case: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    name = REFUSED_NAMES[case]

    line = loaded(
        monkeypatch, tmp_path, f"{GROUPS}[api.users]\n{toml(name)} = {toml(LONG_TOKEN)}\n"
    )

    assert line.startswith(f"{tmp_path / 'tarry.toml'}: [api.users]: {name[:NAME_LIMIT]!r}")
    assert "\n" not in line
    assert LONG_TOKEN not in line


@pytest.mark.parametrize("case", ["the Temporal UI's", "a zero-width space's", "a long one"])
def test_a_name_before_a_token_in_the_environment_is_held_to_the_rule(
    case: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    name = REFUSED_NAMES[case]

    line = loaded(monkeypatch, tmp_path, "", tokens=f"{name}:{LONG_TOKEN}")

    assert line.startswith(f"TARRY_API_TOKENS: {name[:NAME_LIMIT]!r}")


@pytest.mark.parametrize("case", NOT_MEMBERS)
def test_a_group_member_s_name_is_held_to_the_rule(
    case: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    name = REFUSED_NAMES[case]

    line = loaded(monkeypatch, tmp_path, f'[api.groups]\nops = ["carol"]\ndev = [{toml(name)}]\n')

    assert line.startswith(f"{tmp_path / 'tarry.toml'}: [api] groups: dev: {name[:NAME_LIMIT]!r}")


@pytest.mark.parametrize("case", NOT_ADMINS)
def test_an_admin_s_name_is_held_to_the_rule(
    case: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    name = REFUSED_NAMES[case]

    line = loaded(monkeypatch, tmp_path, f"[api]\nadmins = [{toml(name)}]\n{GROUPS}")

    assert line.startswith(f"{tmp_path / 'tarry.toml'}: [api] admins: ")
    assert repr(name[:NAME_LIMIT]) in line


@pytest.mark.parametrize("case", REFUSED_NAMES)
def test_a_name_mapped_to_the_identity_provider_s_user_is_held_to_the_rule(
    case: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    name = REFUSED_NAMES[case]
    oidc = '[api.oidc]\nissuer = "https://id.example"\naudience = "tarry"\n'

    line = loaded(monkeypatch, tmp_path, f"{GROUPS}{oidc}[api.oidc.users]\n{toml(name)} = 'u1'\n")

    assert line.startswith(f"{tmp_path / 'tarry.toml'}: [api.oidc.users]: {name[:NAME_LIMIT]!r}")


def test_the_local_user_and_the_identity_provider_s_may_be_members_and_admins(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    admins = '[api]\nadmins = ["oidc:00u-dana", "cli:ann"]\n'
    (tmp_path / "tarry.toml").write_text(f'{admins}[api.groups]\nops = ["cli:ann", "oidc:00u-e"]\n')
    monkeypatch.setenv("TARRY_CONFIG", str(tmp_path / "tarry.toml"))

    settings = load_settings()

    assert settings.caller("oidc:00u-e").groups == ("ops",)


async def test_tarry_serve_refuses_a_look_alike_user_in_one_line(tmp_path: Path) -> None:
    line = refused(
        await start("tarry serve", tmp_path, f'[api.users]\n"CLI:root" = "{LONG_TOKEN}"\n')
    )

    assert line.startswith(f"{tmp_path / 'tarry.toml'}: [api.users]: 'CLI:root' is a name Tarry")


# --- The identity provider --------------------------------------------------------------


@pytest.fixture
async def oidc_api(
    agent: Agent, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, provider: IdentityProvider
) -> AsyncIterator[Api]:
    """The API with `provider`, whose `preferred_username` names the user (as the old
    default of many guides), the group ops of carol, and bob's static token."""
    config = oidc_config(provider, user_claim="preferred_username", jwks_cooldown=0) + GROUPS
    async with api_with(agent, tmp_path, monkeypatch, config) as url, client(url) as http:
        yield Api(http, agent, url)


@pytest.mark.parametrize("case", REFUSED_NAMES)
async def test_the_identity_provider_s_user_is_held_to_the_rule(
    case: str, oidc_api: Api, provider: IdentityProvider
) -> None:
    token = provider.token(preferred_username=REFUSED_NAMES[case])

    response = await oidc_api.http.get("/v1/runs", headers=as_(token))

    assert error_of(response) == (403, ErrorCode.USER_NAME_REFUSED)
    assert "the token's 'preferred_username' claim: " in response.json()["error"]["message"]


async def test_a_signed_in_cli_root_cannot_read_the_run_cli_root_started(
    agent: Agent, oidc_api: Api, provider: IdentityProvider
) -> None:
    agent.model.add(say("Hello."))
    local = agent.tarry.acting_as(Caller("cli:root"))
    run = await local.start(RunInput(prompt="hi", timeouts=agent.timeouts))
    await run.wait_for({Phase.WAITING_USER}, TIMEOUT)
    as_cli_root = as_(provider.token(preferred_username="cli:root"))

    read = await oidc_api.http.get(f"/v1/runs/{run.id}", headers=as_cli_root)
    replied = await oidc_api.http.post(
        f"/v1/runs/{run.id}/messages", json={"text": "mine"}, headers=as_cli_root
    )

    assert error_of(read) == (403, ErrorCode.USER_NAME_REFUSED)
    assert error_of(replied) == (403, ErrorCode.USER_NAME_REFUSED)


async def test_a_signed_in_user_named_like_a_group_cannot_decide_its_calls(
    oidc_api: Api, provider: IdentityProvider
) -> None:
    oidc_api.http.headers.update(as_(BOB))
    run_id = await gated(oidc_api, approvers={"write_file": ["ops"]})

    decided = await oidc_api.http.post(
        f"/v1/runs/{run_id}/approvals",
        json={"call_id": "w1", "approved": True},
        headers=as_(provider.token(preferred_username="ops")),
    )

    assert error_of(decided) == (403, ErrorCode.USER_NAME_REFUSED)


async def test_an_unmapped_user_of_the_identity_provider_is_namespaced(
    agent: Agent, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, provider: IdentityProvider
) -> None:
    agent.model.add(say("Hello."), say("Hello."))
    config = oidc_config(provider)  # the default claim: sub
    async with api_with(agent, tmp_path, monkeypatch, config) as url, client(url) as http:
        api = Api(http, agent, url)
        http.headers.update(as_(BOB))
        bobs = await api.start("bob's own")
        as_oidc_bob = as_(provider.token(sub="bob"))

        read = await http.get(f"/v1/runs/{bobs}", headers=as_oidc_bob)
        http.headers.update(as_oidc_bob)
        theirs = await api.start("hi")
        messages = await transcript(api, theirs)

    assert error_of(read) == (404, ErrorCode.RUN_NOT_FOUND)  # bob's static user's, not theirs
    assert [m.get("by") for m in messages][:1] == ["oidc:bob"]


async def test_a_mapped_user_of_the_identity_provider_has_the_name_and_groups_it_is_mapped_to(
    agent: Agent, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, provider: IdentityProvider
) -> None:
    config = oidc_config(provider) + '[api.oidc.users]\ncarol = "00u-carol"\n' + GROUPS
    async with api_with(agent, tmp_path, monkeypatch, config) as url, client(url) as http:
        api = Api(http, agent, url)
        http.headers.update(as_(provider.token(sub="00u-carol", groups=[])))
        run_id = await gated(api, approvers={"write_file": ["ops"]})

        state = (await http.get(f"/v1/runs/{run_id}")).json()
        messages = await transcript(api, run_id)

    assert [m.get("by") for m in messages][:1] == ["carol"]
    assert [p["may_decide"] for p in state["pending_approvals"]] == [True]  # carol is in ops


async def test_a_mapped_claim_outside_the_rule_signs_in_as_its_name(
    agent: Agent, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, provider: IdentityProvider
) -> None:
    # A CI job's `sub` (GitHub Actions'), longer than a name may be.
    job = "repo:acme/a-repository-with-a-long-name:environment:production-europe-west"
    agent.model.add(say("Hello."))
    config = oidc_config(provider) + f'[api.oidc.users]\nci-deploy = "{job}"\n'
    async with api_with(agent, tmp_path, monkeypatch, config) as url, client(url) as http:
        api = Api(http, agent, url)
        http.headers.update(as_(provider.token(sub=job)))
        run_id = await api.start("deploy")
        messages = await transcript(api, run_id)

    assert len(job) > NAME_LIMIT
    assert [m.get("by") for m in messages][:1] == ["ci-deploy"]


def test_one_claim_mapped_to_two_names_is_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    oidc = '[api.oidc]\nissuer = "https://id.example"\naudience = "tarry"\n'

    line = loaded(monkeypatch, tmp_path, f'{oidc}[api.oidc.users]\nann = "u1"\nbea = "u1"\n')

    assert line == (
        f"{tmp_path / 'tarry.toml'}: [api.oidc] users: 'ann' and 'bea' are both 'u1'; map it once"
    )


# --- The sign-in gateway ----------------------------------------------------------------


@pytest.fixture
async def gateway(
    agent: Agent, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Api]:
    """The API behind the gateway of oauth2-proxy's headers, the group ops of carol, and
    bob's static token; requests from the gateway's address."""
    async with (
        api_with(agent, tmp_path, monkeypatch, GATEWAY_CONFIG + GROUPS) as url,
        client(url, local_address=GATEWAY) as http,
    ):
        yield Api(http, agent, url)


@pytest.mark.parametrize("case", SENT_BY_THE_GATEWAY)
async def test_the_gateway_s_user_is_held_to_the_rule(case: str, gateway: Api) -> None:
    name = SENT_BY_THE_GATEWAY[case]

    response = await gateway.http.get("/v1/runs", headers={"X-Auth-Request-User": name})

    assert error_of(response) == (403, ErrorCode.USER_NAME_REFUSED)
    assert "the sign-in gateway's X-Auth-Request-User: " in response.json()["error"]["message"]


async def test_the_gateway_s_user_with_an_invisible_character_is_refused(gateway: Api) -> None:
    # What oauth2-proxy forwards for `alice\u200b`: its UTF-8 bytes.
    headers = {b"X-Auth-Request-User": "alice\u200b".encode()}

    response = await gateway.http.get("/v1/runs", headers=headers)

    assert error_of(response) == (403, ErrorCode.USER_NAME_REFUSED)


async def test_a_gateway_user_named_like_a_group_cannot_decide_its_calls(gateway: Api) -> None:
    gateway.http.headers.update({"X-Auth-Request-User": "bob"})
    run_id = await gated(gateway, approvers={"write_file": ["ops"]})

    decided = await gateway.http.post(
        f"/v1/runs/{run_id}/approvals",
        json={"call_id": "w1", "approved": True},
        headers={"X-Auth-Request-User": "ops"},
    )

    assert error_of(decided) == (403, ErrorCode.USER_NAME_REFUSED)


async def test_a_user_header_sent_twice_is_401_and_signs_no_one_in(gateway: Api) -> None:
    headers = [("X-Auth-Request-User", "alice"), ("X-Auth-Request-User", "bob")]

    response = await gateway.http.get("/v1/runs", headers=headers)

    assert error_of(response) == (401, ErrorCode.USER_HEADER_REPEATED)
    assert response.headers["WWW-Authenticate"] == "Bearer"


# --- Reading the audit trail ------------------------------------------------------------


async def test_tarry_audit_prints_control_characters_escaped(agent: Agent) -> None:
    agent.model.add(say("Hello."))
    run = await agent.start("hi")
    await run.wait_for({Phase.WAITING_USER}, TIMEOUT)
    handle = agent.tarry.client.get_workflow_handle(run.id)
    # As anyone who reaches Temporal can send it: a reason that would clear the screen
    # and print a made-up record on a line of its own.
    forged = "done\x1b[2J\n2026-01-01T00:00:00+00:00 run-x stop alice api fake"
    await handle.signal("stop", {"reason": forged, "by": "mallory\u200b"})
    await run.wait_for({Phase.COMPLETED}, TIMEOUT)
    cli = Cli(agent_env(agent), agent)

    table = await cli.ok("audit", "--run", run.id)

    lines = table.splitlines()
    assert len(lines) == 1 + len((await agent.tarry.audit(run=run.id)).records)
    assert "\x1b" not in table
    assert "\u200b" not in table
    assert "mallory\\u200b" in lines[-1]
    assert "done\\x1b[2J\\n2026-01-01" in lines[-1]
