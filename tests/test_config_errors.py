"""A configuration that is wrong says what is wrong: every entry point (the worker,
`tarry worker`, `tarry dev`, `tarry serve`, `tarry mcp`) refuses a bad `TARRY_*` setting
or `TARRY_CONFIG` file at its start with one line on stderr, naming the variable, or the
file, table and key, and exit code 2, never a traceback.

Every process here fails before it needs Temporal: its address is a closed port, so one
that got past its configuration would fail differently (or, `tarry dev`, start a
server; these tests would then see no error line at all).
"""

from __future__ import annotations

import asyncio
import socket
import sys
from pathlib import Path

import pytest
from pydantic import SecretStr

from tarry.config.settings import MIN_API_TOKEN_LENGTH, TarrySettings
from tarry.temporal.entrypoint import CONFIG_ERROR_EXIT
from tests.cli import CLOSED_PORT, TARRY, Result, cli_env, finish

LONG_TOKEN = "a-token-long-enough-to-keep"
ENTRY_POINTS = {
    "python -m workers": [sys.executable, "-m", "workers"],
    "tarry worker": [str(TARRY), "worker"],
    "tarry dev": [str(TARRY), "dev"],
    "tarry serve": [str(TARRY), "serve", "--port", "0"],
    "tarry mcp": [str(TARRY), "mcp"],
}
"""Each way of starting a process that reads the configuration, as its user types it."""


async def start(
    entry_point: str, tmp_path: Path, config: str | None = None, **settings: str
) -> Result:
    """Runs `entry_point` with the `TARRY_*` `settings` and, given, a `TARRY_CONFIG` file
    holding `config`; its exit code and output."""
    env = cli_env(CLOSED_PORT, "config-errors") | settings
    if config is not None:
        (tmp_path / "tarry.toml").write_text(config)
        env["TARRY_CONFIG"] = str(tmp_path / "tarry.toml")
    process = await asyncio.create_subprocess_exec(
        *ENTRY_POINTS[entry_point],
        cwd=tmp_path,  # `tarry dev` would keep its data in ./.tarry
        env=env,
        stdin=asyncio.subprocess.PIPE,  # `finish` closes it: `tarry mcp` reads it
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    return await finish(process)


def refused(result: Result, code: int = CONFIG_ERROR_EXIT) -> str:
    """The one error line of a process that refused its configuration (or, with another
    exit `code`, could not start), without `error: `."""
    assert result.code == code, result.err
    assert "Traceback" not in result.out + result.err
    assert len(result.err.splitlines()) == 1, result.err
    assert result.err.startswith("error: "), result.err
    return result.err.removeprefix("error: ").rstrip("\n")


# --- The config file -------------------------------------------------------------


@pytest.mark.parametrize("entry_point", ENTRY_POINTS)
async def test_a_misspelled_key_names_the_file_the_table_and_the_nearest_key(
    entry_point: str, tmp_path: Path
) -> None:
    config = '[profiles.fast]\nmodle = "gpt-4o"\n'

    line = refused(await start(entry_point, tmp_path, config))

    assert line == (
        f"{tmp_path / 'tarry.toml'}: unknown key 'modle' in [profiles.fast]; did you mean 'model'?"
    )


@pytest.mark.parametrize(
    ("table", "key", "where", "nearest"),
    [
        ("", "profile", "at the top level", "profiles"),
        ('[mcp_servers.files]\ncommand = "mcp-files"\n', "arg", "in [mcp_servers.files]", "args"),
        ("[api]\n", "token", "in [api]", "tokens"),
        ("[profiles.fast.prices]\ninput = 1\noutput = 2\n", "cache_reed",
         "in [profiles.fast.prices]", "cache_read"),
        ("[agents.researcher]\n", "tool", "in [agents.researcher]", "tools"),
        ('[[notify]]\nurl = "https://hooks.example"\nevents = ["ended"]\nsecret = "s"\n',
         "secrets", "in [[notify]]", "secret"),
    ],
    ids=["top-level", "mcp-server", "api", "prices", "agent", "notify"],
)  # fmt: skip
async def test_an_unknown_key_is_refused_in_every_table(
    table: str, key: str, where: str, nearest: str, tmp_path: Path
) -> None:
    line = refused(await start("python -m workers", tmp_path, f"{table}{key} = []\n"))

    assert line == (
        f"{tmp_path / 'tarry.toml'}: unknown key {key!r} {where}; did you mean {nearest!r}?"
    )


async def test_an_unknown_table_lists_the_tables_there_are(tmp_path: Path) -> None:
    line = refused(await start("python -m workers", tmp_path, "[telemetry]\nport = 1\n"))

    assert line.endswith("unknown key 'telemetry' at the top level; the keys are profiles, "
                         "mcp_servers, oauth_providers, agents, api, notify, guardrail, "
                         "limits, embedding")  # fmt: skip


async def test_a_toml_syntax_error_names_the_file_line_and_column(tmp_path: Path) -> None:
    config = '[profiles.fast]\nmodel = "gpt-4o"\ntemperature = \n'

    line = refused(await start("python -m workers", tmp_path, config))

    assert line.startswith(f"{tmp_path / 'tarry.toml'}: not valid TOML: ")
    assert line.endswith("(at line 3, column 15)")


@pytest.mark.parametrize("entry_point", ["python -m workers", "tarry dev"])
async def test_a_bad_value_names_the_file_the_profile_and_the_field(
    entry_point: str, tmp_path: Path
) -> None:
    config = '[profiles.fast]\nmodel = "gpt-4o"\ntemperature = 5\n'

    line = refused(await start(entry_point, tmp_path, config))

    assert line == (
        f"{tmp_path / 'tarry.toml'}: [profiles.fast] temperature: "
        "Input should be less than or equal to 2"
    )


async def test_a_table_that_breaks_its_own_rule_is_named(tmp_path: Path) -> None:
    config = '[mcp_servers.files]\nargs = ["--root", "."]\n'

    line = refused(await start("python -m workers", tmp_path, config))

    assert line == (
        f"{tmp_path / 'tarry.toml'}: [mcp_servers.files]: an MCP server needs either "
        "`command` (stdio) or `url` (HTTP)"
    )


async def test_a_notify_entry_without_a_secret_is_named_as_an_array_of_tables(
    tmp_path: Path,
) -> None:
    config = '[[notify]]\nurl = "https://hooks.example/tarry"\nevents = ["ended"]\n'

    line = refused(await start("python -m workers", tmp_path, config))

    assert line == (
        f"{tmp_path / 'tarry.toml'}: [[notify]]: a `secret` signs the notifications; only"
        ' `format = "slack"` goes without'
    )


NOTIFY_ALICE = (
    '[[notify]]\nurl = "https://hooks.example/tarry"\nevents = ["waiting_for_approval"]\n'
    'secret = "s"\nto = "alcie"\n'
)
"""A `[[notify]]` entry whose links are for `alcie`, a typo of the user `alice`."""


@pytest.mark.parametrize("entry_point", ["python -m workers", "tarry serve"])
async def test_a_notify_entry_to_no_user_names_the_entry_and_the_users_there_are(
    entry_point: str, tmp_path: Path
) -> None:
    config = f'[api]\naction_key = "{LONG_TOKEN}"\n[api.users]\nalice = "{LONG_TOKEN}"\n'

    line = refused(await start(entry_point, tmp_path, config + NOTIFY_ALICE))

    assert line == (
        f"{tmp_path / 'tarry.toml'}: [[notify]] entry 1: to = 'alcie' names no user (users:"
        ' alice); add alcie = "TOKEN" to [api.users] (or TARRY_API_TOKENS=NAME:TOKEN), or'
        " leave `to` out"
    )


async def test_a_notify_entry_to_a_user_without_an_action_key_says_where_the_key_goes(
    tmp_path: Path,
) -> None:
    config = f'[api.users]\nalcie = "{LONG_TOKEN}"\n'

    line = refused(await start("python -m workers", tmp_path, config + NOTIFY_ALICE))

    assert line == (
        f"{tmp_path / 'tarry.toml'}: [[notify]] entry 1: to = 'alcie' needs an action key to"
        " sign its links; set [api] action_key or TARRY_ACTION_KEY (16 characters or more),"
        " or leave `to` out"
    )


def test_a_notify_entry_to_a_user_of_the_environment_s_tokens_with_its_key_is_accepted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "tarry.toml"
    config.write_text(NOTIFY_ALICE)
    monkeypatch.setenv("TARRY_CONFIG", str(config))
    monkeypatch.setenv("TARRY_API_TOKENS", f"alcie:{LONG_TOKEN}")
    monkeypatch.setenv("TARRY_ACTION_KEY", LONG_TOKEN)

    [target] = TarrySettings().notify_targets()

    assert target.to == "alcie"


async def test_several_problems_are_one_line_that_counts_the_others(tmp_path: Path) -> None:
    config = "[profiles.fast]\ntemperature = 5\ntop_p = 0\n[profiles.slow]\nmodel = 1\n"

    line = refused(await start("python -m workers", tmp_path, config))

    assert line.startswith(f"{tmp_path / 'tarry.toml'}: [profiles.fast] temperature: ")
    assert line.endswith(" (and 2 more problems)")


async def test_a_config_file_that_is_not_there_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.toml"

    line = refused(await start("tarry serve", tmp_path, TARRY_CONFIG=str(missing)))

    assert line == f"TARRY_CONFIG={missing}: No such file or directory"


# --- The environment --------------------------------------------------------------


@pytest.mark.parametrize("entry_point", ENTRY_POINTS)
async def test_a_metrics_host_with_a_port_points_to_the_port_setting(
    entry_point: str, tmp_path: Path
) -> None:
    line = refused(await start(entry_point, tmp_path, TARRY_METRICS_HOST="127.0.0.1:9464"))

    assert line.startswith("TARRY_METRICS_HOST: '127.0.0.1:9464' is not an IPv4 address")
    assert line.endswith("give the port as TARRY_METRICS_PORT")


@pytest.mark.parametrize(
    ("entry_point", "name", "value", "problem"),
    [
        ("python -m workers", "TARRY_METRICS_PORT", "9464/tcp", "Input should be a valid integer"),
        ("tarry worker", "TARRY_WORKFLOW_TASK_POLLERS", "1", "Input should be greater than or "),
        ("tarry mcp", "TARRY_TRACING", "maybe", "Input should be a valid boolean"),
        ("tarry serve", "TARRY_API_PORT", "70000", "Input should be less than or equal to 65535"),
    ],
)
async def test_a_bad_setting_is_one_line_naming_the_variable(
    entry_point: str, name: str, value: str, problem: str, tmp_path: Path
) -> None:
    line = refused(await start(entry_point, tmp_path, **{name: value}))

    assert line.startswith(f"{name}: {problem}")


# --- The HTTP API's tokens and origins ----------------------------------------------


@pytest.mark.parametrize("entry_point", ["tarry serve", "tarry dev"])
async def test_a_short_api_token_is_refused_without_showing_it(
    entry_point: str, tmp_path: Path
) -> None:
    short = "s3cret-but-short"[: MIN_API_TOKEN_LENGTH - 1]

    line = refused(await start(entry_point, tmp_path, TARRY_API_TOKENS=f"{LONG_TOKEN},{short}"))

    assert line.startswith(f"TARRY_API_TOKENS: a token needs at least {MIN_API_TOKEN_LENGTH} ")
    assert short not in line


async def test_a_short_api_token_in_the_config_file_is_refused(tmp_path: Path) -> None:
    line = refused(await start("tarry serve", tmp_path, '[api]\ntokens = ["0123456789"]\n'))

    assert line.startswith(f"{tmp_path / 'tarry.toml'}: [api] tokens: a token needs at least ")
    assert "0123456789" not in line


AMBIGUOUS_USERS = {
    "one token for two users": (
        {"TARRY_API_TOKENS": f"alice:{LONG_TOKEN},bob:{LONG_TOKEN}"},
        None,
        "the users 'alice' and 'bob' have one token; give each their own",
    ),
    "a user named like a group": (
        {"TARRY_API_TOKENS": f"ops:{LONG_TOKEN}"},
        '[api.groups]\nops = ["alice"]\n',
        "'ops' names a user and a group of [api.groups]",
    ),
    "the Temporal UI's name": (
        {},
        f'[api.users]\ntemporal-ui = "{LONG_TOKEN}"\n',
        "'temporal-ui' is a name Tarry records for no person",
    ),
    "a door's name": (
        {"TARRY_API_TOKENS": f"schedule:{LONG_TOKEN}"},
        None,
        "'schedule' is a name Tarry records for no person",
    ),
    "a local user's name": (
        {"TARRY_API_TOKENS": f"cli:root:{LONG_TOKEN}"},
        None,
        "'cli' is a name Tarry records for no person",
    ),
    "a token of white space": (
        {"TARRY_API_TOKENS": " " * 20},
        None,
        "TARRY_API_TOKENS: only white space; a token cannot be blank",
    ),
    "a user's token of white space": (
        {},
        f'[api.users]\nalice = "{" " * 20}"\n',
        "[api.users] alice: a token cannot hold white space",
    ),
}


@pytest.mark.parametrize("case", AMBIGUOUS_USERS)
async def test_users_the_api_could_not_tell_apart_are_refused(case: str, tmp_path: Path) -> None:
    settings, config, problem = AMBIGUOUS_USERS[case]

    line = refused(await start("tarry serve", tmp_path, config, **settings))

    assert problem in line
    assert LONG_TOKEN not in line


@pytest.mark.parametrize("entry_point", ["tarry serve", "tarry dev"])
async def test_any_origin_is_refused_while_the_api_has_no_tokens(
    entry_point: str, tmp_path: Path
) -> None:
    origins = "http://inbox.example,*"

    line = refused(await start(entry_point, tmp_path, TARRY_API_CORS_ORIGINS=origins))

    assert line.startswith("TARRY_API_CORS_ORIGINS=* lets any web page drive the runs")


@pytest.mark.parametrize("entry_point", ["tarry serve", "tarry dev"])
async def test_the_null_origin_is_refused_while_the_api_has_no_tokens(
    entry_point: str, tmp_path: Path
) -> None:
    line = refused(await start(entry_point, tmp_path, TARRY_API_CORS_ORIGINS="null"))

    assert line.startswith("TARRY_API_CORS_ORIGINS=null lets any web page (a sandboxed frame")


async def test_the_null_origin_is_refused_with_tokens_too(tmp_path: Path) -> None:
    line = refused(
        await start(
            "tarry serve", tmp_path, TARRY_API_TOKENS=LONG_TOKEN, TARRY_API_CORS_ORIGINS="null"
        )
    )

    assert line.startswith("TARRY_API_CORS_ORIGINS=null lets any web page (a sandboxed frame")


@pytest.mark.parametrize("entry_point", ["tarry serve", "tarry dev"])
async def test_any_host_is_refused_while_the_api_has_no_tokens(
    entry_point: str, tmp_path: Path
) -> None:
    line = refused(await start(entry_point, tmp_path, TARRY_API_ALLOWED_HOSTS="tarry.example,*"))

    assert line.startswith("TARRY_API_ALLOWED_HOSTS=* lets any web page whose name resolves")


def test_any_origin_is_accepted_with_a_token_from_the_config_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "tarry.toml"
    config.write_text(f'[api]\ntokens = ["{LONG_TOKEN}"]\n')
    monkeypatch.setenv("TARRY_CONFIG", str(config))
    monkeypatch.setenv("TARRY_API_CORS_ORIGINS", "*")

    settings = TarrySettings()

    assert settings.tarry_api_cors_origins == ["*"]
    assert settings.api_tokens() == [SecretStr(LONG_TOKEN)]


# --- What a well-configured worker cannot do at its start --------------------------


@pytest.mark.parametrize("entry_point", ["python -m workers", "tarry worker"])
async def test_a_worker_that_cannot_reach_temporal_says_where_it_looked(
    entry_point: str, tmp_path: Path
) -> None:
    line = refused(await start(entry_point, tmp_path), code=1)

    assert line == (
        f"cannot reach Temporal at {CLOSED_PORT}; start it with `tarry dev` or set TEMPORAL_ADDRESS"
    )


async def test_a_metrics_port_in_use_is_one_line_naming_the_setting(tmp_path: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]

        line = refused(await start("python -m workers", tmp_path, TARRY_METRICS_PORT=str(port)), 1)

    assert "Address already in use" in line
    assert line.endswith("set TARRY_METRICS_PORT to a free port")


@pytest.mark.parametrize(
    "half", [{"TARRY_DEPLOYMENT": "tarry"}, {"TARRY_BUILD_ID": "2026-11-27.1"}]
)
async def test_a_worker_given_half_of_a_deployment_version_says_both_go_together(
    half: dict[str, str], tmp_path: Path
) -> None:
    line = refused(await start("python -m workers", tmp_path, **half))

    assert line == (
        "TARRY_DEPLOYMENT and TARRY_BUILD_ID turn versioned deploys on together; set both "
        "(the deployment's name and this worker's build), or neither"
    )
