"""`[limits]` in the config file: which entry gives a person each setting (their user
entry, else the most generous of their groups', else the default), and a bad entry is a
config error naming the file, the table and what to write. `tests/test_limits.py` shows
the limits at the doors.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tarry.config.settings import ConfigError, load_settings
from tarry.core.identities import Caller
from tarry.core.limits import ConcurrencyPolicy, Limits

TEAM = """
[api.users]
alice = "alice-token-long-enough"
bob = "bob-token-long-enough-too"
carol = "carol-token-long-enough-3"

[api.groups]
ops = ["alice", "bob"]
interns = ["bob"]

[limits]
time_zone = "Europe/Berlin"

[limits.default]
models = ["cheap-*"]
max_cost_usd_per_day = 5.0
max_run_budget = { max_total_tokens = 10000 }

[limits.group.ops]
models = ["ops-*"]
max_cost_usd_per_day = 50.0
max_concurrent_runs = 3

[limits.group.interns]
models = ["intern-*"]
max_cost_usd_per_day = 1.0
max_concurrent_runs = 10

[limits.user.alice]
models = ["*"]
max_cost_usd_per_day = 2.0
"""


CallerOf = Callable[..., Caller]


@pytest.fixture
def caller_of(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> CallerOf:
    """The caller a door makes of a user (in the groups their sign-in names), under a
    `TARRY_CONFIG` file of `config`."""

    def of(user: str, groups: tuple[str, ...] = (), config: str = TEAM) -> Caller:
        path = tmp_path / "tarry.toml"
        path.write_text(config)
        monkeypatch.setenv("TARRY_CONFIG", str(path))
        return load_settings().caller(user, groups)

    return of


def problem_of(config: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    path = tmp_path / "tarry.toml"
    path.write_text(config)
    monkeypatch.setenv("TARRY_CONFIG", str(path))
    with pytest.raises(ConfigError) as refused:
        load_settings()
    return str(refused.value).removeprefix(f"{path}: ")


def test_without_a_limits_table_a_caller_has_no_limits(caller_of: CallerOf) -> None:
    assert caller_of("alice", config='[api.groups]\nops = ["alice"]\n').limits is None


def test_a_person_in_no_entry_has_the_default_s_limits(caller_of: CallerOf) -> None:
    limits = caller_of("carol").limits

    assert limits == Limits(
        models=("cheap-*",),
        max_cost_usd_per_day=5.0,
        max_run_tokens=10000,
        time_zone="Europe/Berlin",
    )


def test_a_user_entry_wins_over_their_groups_setting_by_setting(caller_of: CallerOf) -> None:
    limits = caller_of("alice").limits

    assert limits is not None
    assert (limits.models, limits.max_cost_usd_per_day) == (("*",), 2.0)
    # What her entry leaves out comes from her group (ops), then the default.
    assert (limits.max_concurrent_runs, limits.max_run_tokens) == (3, 10000)


def test_among_groups_the_most_generous_value_of_each_setting_wins(
    caller_of: CallerOf,
) -> None:
    limits = caller_of("bob").limits

    assert limits is not None
    assert limits.models == ("ops-*", "intern-*")
    assert limits.max_cost_usd_per_day == 50.0  # ops's, not interns'
    assert limits.max_concurrent_runs == 10  # interns', not ops's


def test_a_group_the_sign_in_names_counts_as_a_configured_one(caller_of: CallerOf) -> None:
    limits = caller_of("oidc:dave", ("ops",)).limits

    assert limits is not None
    assert (limits.models, limits.max_cost_usd_per_day) == (("ops-*",), 50.0)


def test_with_no_entry_setting_it_a_setting_is_not_limited(caller_of: CallerOf) -> None:
    limits = caller_of("carol", config="[limits]\n").limits

    assert limits == Limits()
    assert limits.model_problem("any-profile") is None
    assert limits.at_max_concurrent_runs is ConcurrencyPolicy.QUEUE


def test_an_unknown_key_in_an_entry_names_the_entry_and_the_nearest_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = '[limits.user.alice]\nmodel = ["*"]\n'

    assert problem_of(config, tmp_path, monkeypatch) == (
        "unknown key 'model' in [limits.user.alice]; did you mean 'models'?"
    )


def test_a_cap_that_is_not_above_zero_names_the_entry_and_the_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = "[limits.group.ops]\nmax_tokens_per_day = 0\n"

    assert problem_of(config, tmp_path, monkeypatch) == (
        "[limits.group.ops] max_tokens_per_day: Input should be greater than 0"
    )


def test_a_time_zone_outside_the_iana_database_says_what_to_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = '[limits]\ntime_zone = "Berlin"\n'

    assert problem_of(config, tmp_path, monkeypatch) == (
        "[limits] time_zone: 'Berlin' is no time zone of the IANA database; write one such"
        ' as "UTC" or "Europe/Berlin"'
    )


def test_a_user_entry_under_a_name_no_person_has_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = "[limits.user.temporal-ui]\nmax_tokens_per_day = 10\n"

    assert problem_of(config, tmp_path, monkeypatch).startswith(
        "[limits] user: 'temporal-ui' is a name Tarry records for no person"
    )
