"""Settings from the environment: defaults, each variable, and every bad value reported at once."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from cliffwatch.bootstrap.settings import load_settings
from cliffwatch.config import Settings, SettingsInvalid

VARIABLES = ("CLIFFWATCH_ALLOWED_TARGETS", "CLIFFWATCH_LOG_FORMAT", "CLIFFWATCH_LOG_LEVEL")


def test_an_empty_environment_gives_the_defaults() -> None:
    """No variables: loopback-only allowlist, automatic log format, info level."""
    settings = Settings.from_env({})
    assert [e.describe() for e in settings.allowlist.entries] == ["127.0.0.0/8", "::1/128", "localhost"]
    assert settings.log_format == "auto"
    assert settings.log_level == "info"


def test_the_process_environment_is_read_when_none_is_given(monkeypatch: pytest.MonkeyPatch) -> None:
    """from_env() without an argument reads os.environ."""
    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CLIFFWATCH_LOG_LEVEL", "debug")
    assert Settings.from_env().log_level == "debug"


def test_allowed_targets_replace_the_default() -> None:
    """A comma-separated list becomes the allowlist, spaces and empty items ignored, loopback no longer implied."""
    settings = Settings.from_env({"CLIFFWATCH_ALLOWED_TARGETS": " 10.0.0.0/8 ,, api.internal:8443,"})
    assert [e.describe() for e in settings.allowlist.entries] == ["10.0.0.0/8", "api.internal:8443"]
    assert settings.allowlist.check("10.1.1.1", 80, []) is None
    assert settings.allowlist.check("127.0.0.1", 80, []) is not None


def test_a_blank_allowlist_allows_nothing() -> None:
    """Setting the variable to nothing is an empty allowlist, not the default."""
    settings = Settings.from_env({"CLIFFWATCH_ALLOWED_TARGETS": ""})
    assert settings.allowlist.entries == ()
    assert settings.allowlist.check("127.0.0.1", 80, []) is not None


def test_both_allowlists_carry_the_deny_list_these_settings_make_whatever_they_allow() -> None:
    """The Toxiproxy API, the database, the Ray cluster and CLIFFWATCH_DENIED_TARGETS are refused however wide the
    allowlists are; a copy with other control planes (``replace``) is judged by its own."""
    settings = Settings.from_env({
        "CLIFFWATCH_ALLOWED_TARGETS": "0.0.0.0/0", "CLIFFWATCH_ALLOWED_PROXY_LISTEN": "0.0.0.0/0",
        "CLIFFWATCH_TOXIPROXY_URL": "http://127.0.0.1:18474",
        "CLIFFWATCH_DATABASE_URL": "postgresql+asyncpg://cw:pw@10.0.0.5/cw",
        "CLIFFWATCH_RAY_ADDRESS": "10.0.0.6:6379", "CLIFFWATCH_DENIED_TARGETS": "10.9.0.0/16, admin.internal:8443",
    })  # fmt: skip
    for allowlist in (settings.allowlist, settings.proxy_listen):
        for host, port, rule in (
            ("127.0.0.1", 18474, "cliffwatch's Toxiproxy API"), ("10.0.0.5", 5432, "cliffwatch's database"),
            ("10.0.0.6", 6379, "the Ray cluster's GCS"), ("10.0.0.6", 8265, "the Ray cluster's dashboard"),
            ("10.9.3.3", 80, "CLIFFWATCH_DENIED_TARGETS (10.9.0.0/16)"),
            ("admin.internal", 8443, "CLIFFWATCH_DENIED_TARGETS (admin.internal:8443)"),
            ("169.254.169.254", 80, "link-local"),
        ):  # fmt: skip
            refusal = allowlist.check(host, port, ())
            assert refusal is not None, (host, port)
            assert rule in refusal, (host, port, refusal)
        assert allowlist.check("10.0.0.5", 5433, ()) is None
    moved = replace(settings, toxiproxy_url="http://127.0.0.1:28474")
    assert moved.allowlist.check("127.0.0.1", 18474, ()) is None
    assert moved.allowlist.check("127.0.0.1", 28474, ()) is not None


def test_a_bad_denied_target_is_named_with_its_variable() -> None:
    with pytest.raises(SettingsInvalid) as caught:
        Settings.from_env({"CLIFFWATCH_DENIED_TARGETS": "10.0.0.1,not a host"})
    assert caught.value.problems == ["CLIFFWATCH_DENIED_TARGETS: not a host, IP or CIDR: 'not a host'"]


def test_proxies_may_listen_on_loopback_only_unless_configured() -> None:
    """By default a proxy may listen on loopback (a wildcard or a network address is refused, naming the
    setting); the setting replaces that list, in the targets' syntax."""
    default = Settings.from_env({}).proxy_listen
    assert default.check("127.0.0.1", 0, []) is None
    assert default.check("localhost", 0, []) is None
    refusal = default.check("0.0.0.0", 8000, [])
    assert refusal is not None
    assert "proxy listen allowlist" in refusal
    assert "CLIFFWATCH_ALLOWED_PROXY_LISTEN" in refusal
    opened = Settings.from_env({"CLIFFWATCH_ALLOWED_PROXY_LISTEN": "0.0.0.0,toxiproxy"}).proxy_listen
    assert opened.check("0.0.0.0", 8000, []) is None
    assert opened.check("toxiproxy", 0, []) is None
    assert opened.check("127.0.0.1", 0, []) is not None


@pytest.mark.parametrize(("value", "expected"), [("json", "json"), ("console", "console"), ("JSON", "json")])
def test_log_format(value: str, expected: str) -> None:
    """CLIFFWATCH_LOG_FORMAT takes auto, json or console, in any case."""
    assert Settings.from_env({"CLIFFWATCH_LOG_FORMAT": value}).log_format == expected


@pytest.mark.parametrize(("value", "expected"), [("debug", "debug"), ("Warning", "warning"), ("ERROR", "error")])
def test_log_level(value: str, expected: str) -> None:
    """CLIFFWATCH_LOG_LEVEL takes debug, info, warning or error, in any case."""
    assert Settings.from_env({"CLIFFWATCH_LOG_LEVEL": value}).log_level == expected


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("CLIFFWATCH_ALLOWED_TARGETS", "10.0.0.0/8,not a host", "CLIFFWATCH_ALLOWED_TARGETS: "),
        ("CLIFFWATCH_LOG_FORMAT", "xml", "CLIFFWATCH_LOG_FORMAT: must be one of auto, json, console, got 'xml'"),
        ("CLIFFWATCH_LOG_FORMAT", "", "CLIFFWATCH_LOG_FORMAT: must be one of auto, json, console, got ''"),
        (
            "CLIFFWATCH_LOG_LEVEL",
            "trace",
            "CLIFFWATCH_LOG_LEVEL: must be one of debug, info, warning, error, got 'trace'",
        ),
    ],
)
def test_a_bad_value_is_reported_with_its_variable(name: str, value: str, message: str) -> None:
    """A bad value raises SettingsInvalid with one problem naming the variable and the value."""
    with pytest.raises(SettingsInvalid) as caught:
        Settings.from_env({name: value})
    assert len(caught.value.problems) == 1
    assert caught.value.problems[0].startswith(message)
    assert str(caught.value).startswith("invalid settings: ")


def test_every_bad_value_is_reported_at_once() -> None:
    """All bad variables, and every bad allowlist entry, are listed in one error."""
    with pytest.raises(SettingsInvalid) as caught:
        Settings.from_env(
            {
                "CLIFFWATCH_ALLOWED_TARGETS": "bad one,127.0.0.1,host:0",
                "CLIFFWATCH_LOG_FORMAT": "xml",
                "CLIFFWATCH_LOG_LEVEL": "loud",
            }
        )
    problems = caught.value.problems
    assert len(problems) == 4
    assert [p.split(":")[0] for p in problems] == [
        "CLIFFWATCH_ALLOWED_TARGETS",
        "CLIFFWATCH_ALLOWED_TARGETS",
        "CLIFFWATCH_LOG_FORMAT",
        "CLIFFWATCH_LOG_LEVEL",
    ]
    assert "'bad one'" in problems[0]
    assert "'host:0'" in problems[1]
    assert all(p in str(caught.value) for p in problems)


def test_settings_are_frozen() -> None:
    """Settings cannot be changed after they are built."""
    settings = Settings.from_env({})
    with pytest.raises(AttributeError):
        settings.log_level = "debug"  # type: ignore[misc]


def test_the_state_directory_follows_xdg_then_home() -> None:
    """CLIFFWATCH_STATE_DIR wins; otherwise $XDG_STATE_HOME/cliffwatch (when absolute), else ~/.local/state."""
    home = {"HOME": "/home/ada"}
    assert Settings.from_env(home).state_dir == Path("/home/ada/.local/state/cliffwatch")
    xdg = {**home, "XDG_STATE_HOME": "/var/lib/ada"}
    assert Settings.from_env(xdg).state_dir == Path("/var/lib/ada/cliffwatch")
    # the XDG spec ignores a relative (or empty) XDG_STATE_HOME
    assert Settings.from_env({**home, "XDG_STATE_HOME": "rel"}).state_dir == Path("/home/ada/.local/state/cliffwatch")
    assert Settings.from_env({**xdg, "CLIFFWATCH_STATE_DIR": "/srv/cw"}).state_dir == Path("/srv/cw")
    assert Settings.from_env({**home, "CLIFFWATCH_STATE_DIR": "~/cw"}).state_dir == Path("/home/ada/cw")
    assert Settings.from_env(home).fault_ledger_path == Path("/home/ada/.local/state/cliffwatch/faults.jsonl")


@pytest.mark.parametrize("value", ["state", "", "./here"])
def test_a_relative_state_directory_is_refused(value: str) -> None:
    """A relative state directory would give each working directory its own fault ledger."""
    with pytest.raises(SettingsInvalid) as caught:
        Settings.from_env({"CLIFFWATCH_STATE_DIR": value})
    assert caught.value.problems == [f"CLIFFWATCH_STATE_DIR: must be an absolute path, got {value!r}"]


def test_settings_built_directly_get_the_default_state_directory(monkeypatch: pytest.MonkeyPatch) -> None:
    """Settings made in code without a state_dir use the process environment's default."""
    monkeypatch.setenv("XDG_STATE_HOME", "/tmp/xdg-state")
    settings = Settings(allowlist=Settings.from_env({}).allowlist)
    assert settings.state_dir == Path("/tmp/xdg-state/cliffwatch")


def test_toxiproxy_settings_default_to_a_server_started_per_run() -> None:
    """With nothing set, no external Toxiproxy and no explicit binary: cliffwatch starts its own."""
    settings = Settings.from_env({"HOME": "/home/someone"})
    assert settings.toxiproxy_url is None
    assert settings.toxiproxy_bin is None
    assert settings.toxiproxy_timeout_s == 5.0


def test_toxiproxy_settings_are_read_and_checked(tmp_path: Path) -> None:
    """A URL, an existing binary and a timeout are taken; each bad one is named with its reason."""
    binary = tmp_path / "toxiproxy-server"
    binary.write_text("")
    settings = Settings.from_env(
        {
            "HOME": "/h",
            "CLIFFWATCH_TOXIPROXY_URL": "http://127.0.0.1:8474/",
            "CLIFFWATCH_TOXIPROXY_BIN": str(binary),
            "CLIFFWATCH_TOXIPROXY_TIMEOUT_S": "2.5",
        }
    )
    assert settings.toxiproxy_url == "http://127.0.0.1:8474"
    assert settings.toxiproxy_bin == binary
    assert settings.toxiproxy_timeout_s == 2.5
    with pytest.raises(SettingsInvalid) as caught:
        Settings.from_env(
            {
                "HOME": "/h",
                "CLIFFWATCH_TOXIPROXY_URL": "toxiproxy:8474",
                "CLIFFWATCH_TOXIPROXY_BIN": str(tmp_path / "missing"),
                "CLIFFWATCH_TOXIPROXY_TIMEOUT_S": "soon",
            }
        )
    text = str(caught.value)
    assert "CLIFFWATCH_TOXIPROXY_URL: must be http(s)://host:port" in text
    assert "CLIFFWATCH_TOXIPROXY_BIN: no such file" in text
    assert "CLIFFWATCH_TOXIPROXY_TIMEOUT_S: must be seconds" in text


def test_the_service_settings_have_working_defaults() -> None:
    """Without any variable the service listens on loopback, uses ./cliffwatch.db and the default caps."""
    settings = Settings.from_env({"HOME": "/h"})
    assert settings.database_url == "sqlite+aiosqlite:///./cliffwatch.db"
    assert (settings.listen_host, settings.listen_port) == ("127.0.0.1", 8080)
    assert settings.caps.max_concurrent_runs == 2
    assert settings.lease_s == 30.0
    assert settings.instance_id


def test_a_config_file_sets_values_and_the_environment_wins_over_it(tmp_path: Path) -> None:
    """Keys of CLIFFWATCH_CONFIG are the variables' names without the prefix; a variable overrides a key."""
    config = tmp_path / "cliffwatch.yaml"
    config.write_text("max_concurrent_runs: 5\nlisten_port: 9000\nallowed_targets: [10.0.0.0/8, localhost]\n")
    settings = load_settings({"HOME": "/h", "CLIFFWATCH_CONFIG": str(config), "CLIFFWATCH_LISTEN_PORT": "9100"})
    assert settings.max_concurrent_runs == 5
    assert settings.listen_port == 9100
    assert [e.describe() for e in settings.allowlist.entries] == ["10.0.0.0/8", "localhost"]


def test_bad_values_in_a_config_file_name_the_file_and_the_key(tmp_path: Path) -> None:
    """Every bad key of the file is reported with the file's name, unknown keys included."""
    config = tmp_path / "cliffwatch.yaml"
    config.write_text("max_concurrent_runs: 0\ndatabase_url: mysql://x\nlisten_prot: 1\n")
    with pytest.raises(SettingsInvalid) as caught:
        load_settings({"HOME": "/h", "CLIFFWATCH_CONFIG": str(config)})
    assert caught.value.problems == [
        f"{config}: database_url: must be sqlite+aiosqlite:///path or postgresql+asyncpg://user:password@host:port/db",
        f"{config}: max_concurrent_runs: must be a whole number in [1, 64], got 0",
        f"{config}: listen_prot: unknown setting",
    ]


@pytest.mark.parametrize(
    ("content", "message"),
    [("- a\n- b\n", "must be a mapping"), ("a: [\n", "not valid YAML")],
)
def test_a_config_file_that_is_not_a_mapping_is_refused(tmp_path: Path, content: str, message: str) -> None:
    """A file that is not a YAML mapping is one clear problem."""
    config = tmp_path / "c.yaml"
    config.write_text(content)
    with pytest.raises(SettingsInvalid, match=message):
        load_settings({"HOME": "/h", "CLIFFWATCH_CONFIG": str(config)})


def test_every_setting_is_documented() -> None:
    """The help text lists each variable with its explanation."""
    from cliffwatch.config import SPECS, describe_settings

    text = describe_settings()
    assert all(spec.env in text and spec.help in text for spec in SPECS)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("allowed_targets: " + "[" * 5_000 + "]" * 5_000 + "\n", "nested too deeply (more than 16 levels)"),
        ("max_concurrent_runs: " + "9" * 5_000 + "\n", "a number of more than 400 characters"),
        ("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n"
         + "".join(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]\n" for i in range(1, 9)),
         "aliases expand to more than 10,000 values"),
    ],
    ids=["deep", "huge-number", "alias-bomb"],
)  # fmt: skip
def test_a_hostile_config_file_is_one_clear_problem(tmp_path: Path, content: str, message: str) -> None:
    """Nesting past the parser's recursion, a number Python will not convert or a nest of aliases is refused
    as a problem with the file, never a crash."""
    config = tmp_path / "c.yaml"
    config.write_text(content)
    with pytest.raises(SettingsInvalid) as caught:
        load_settings({"HOME": "/h", "CLIFFWATCH_CONFIG": str(config)})
    assert len(caught.value.problems) == 1
    assert caught.value.problems[0].startswith(f"CLIFFWATCH_CONFIG: {config}: ")
    assert message in caught.value.problems[0]


def test_a_malformed_ray_address_is_a_settings_problem_and_a_blank_one_means_none() -> None:
    """CLIFFWATCH_RAY_ADDRESS: checked when read (exit 2), not when a run first tries to join it (exit 3)."""
    with pytest.raises(SettingsInvalid) as caught:
        Settings.from_env({"CLIFFWATCH_RAY_ADDRESS": "head:port"})
    assert caught.value.problems == ["CLIFFWATCH_RAY_ADDRESS: 'head:port': the port must be a number from 1 to 65535"]
    assert Settings.from_env({"CLIFFWATCH_RAY_ADDRESS": "  "}).ray_address is None
    assert Settings.from_env({"CLIFFWATCH_RAY_ADDRESS": "ray://head:10001"}).ray_address == "ray://head:10001"


def test_settings_never_read_a_file_themselves() -> None:
    """``config`` imports nothing but the domain: a file ``CLIFFWATCH_CONFIG`` names is read by ``load_settings``,
    and settings asked for without it say so rather than leave the file's values out."""
    with pytest.raises(SettingsInvalid, match="CLIFFWATCH_CONFIG is set, but its file was not read"):
        Settings.from_env({"CLIFFWATCH_CONFIG": "/nowhere.yaml"})
    with pytest.raises(SettingsInvalid, match=r"CLIFFWATCH_CONFIG: cannot read /nowhere.yaml"):
        load_settings({"CLIFFWATCH_CONFIG": "/nowhere.yaml"})
