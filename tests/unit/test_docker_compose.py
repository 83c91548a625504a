"""docker-compose.yml and the Dockerfile: valid Compose, wired to the settings the service reads.

No Docker engine runs where the tests do, so nothing is built or started. The compose file is validated
against the Compose specification's JSON schema (tests/fixtures/compose-spec.json) and read for what it
tells each container; the Dockerfile is read as text, and its health check command is run against a
local HTTP server. docs/operations.md must name every setting.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import pytest
import yaml
from jsonschema import Draft7Validator

from cliffwatch import cli
from cliffwatch.config import SPECS, Settings

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"
SCHEMA = ROOT / "tests" / "fixtures" / "compose-spec.json"
OPERATIONS = ROOT / "docs" / "operations.md"
SETTING_VARIABLES = {spec.env for spec in SPECS}
SERVICES = {"cliffwatch", "postgres", "toxiproxy", "target"}
POSTGRES_PORT = 5432  # the postgres image's, unless PGPORT moves it
TOXIPROXY_DEFAULT_PORT = 8474


# --- reading the files -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    document = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))
    assert isinstance(document, dict)
    return document


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = compose["services"]
    return found


@pytest.fixture(scope="module")
def dockerfile() -> list[tuple[str, str]]:
    """The final stage's instructions, as (INSTRUCTION, arguments)."""
    instructions = _instructions(DOCKERFILE.read_text(encoding="utf-8"))
    last_from = max(i for i, (name, _) in enumerate(instructions) if name == "FROM")
    return instructions[last_from:]


@pytest.fixture(scope="module")
def image_env(dockerfile: list[tuple[str, str]]) -> dict[str, str]:
    """The environment the image sets (ENV of the final stage)."""
    env: dict[str, str] = {}
    for name, arguments in dockerfile:
        if name == "ENV":
            for item in shlex.split(arguments):
                key, sep, value = item.partition("=")
                assert sep, f"ENV {arguments!r}: write ENV KEY=value"
                env[key] = value
    return env


def _instructions(text: str) -> list[tuple[str, str]]:
    """A Dockerfile's instructions, continuation lines joined and comment lines dropped (as Docker does)."""
    instructions: list[tuple[str, str]] = []
    pending = ""
    for line in text.splitlines():
        if line.lstrip().startswith("#") or (not line.strip() and not pending):
            continue
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        name, _, arguments = (pending + line).strip().partition(" ")
        instructions.append((name.upper(), arguments.strip()))
        pending = ""
    assert not pending, "the Dockerfile ends in a continuation line"
    return instructions


def _one(dockerfile: list[tuple[str, str]], instruction: str) -> str:
    found = [arguments for name, arguments in dockerfile if name == instruction]
    assert len(found) == 1, f"the final stage should have one {instruction}, has {len(found)}"
    return found[0]


def _environment(service: Mapping[str, Any]) -> dict[str, str]:
    raw = service.get("environment", {})
    if isinstance(raw, list):  # the KEY=value list form
        return dict(item.partition("=")[::2] for item in raw)
    return {key: "" if value is None else str(value) for key, value in raw.items()}


def _settings(service: Mapping[str, Any], image_env: Mapping[str, str]) -> Settings:
    """The settings a container of the cliffwatch image reads: the image's ENV, then the service's."""
    return Settings.from_env({**image_env, **_environment(service)})


def _container_ports(service: Mapping[str, Any]) -> list[int]:
    """The container ports a service publishes, in either syntax."""
    ports: list[int] = []
    for entry in service.get("ports", []):
        if isinstance(entry, dict):
            ports.append(int(entry["target"]))
        else:  # [host_ip:][host_port:]container_port[/protocol]
            ports.append(int(str(entry).split("/")[0].rsplit(":", 1)[-1]))
    return ports


def _exposed(service: Mapping[str, Any]) -> set[int]:
    return {int(str(port).split("/")[0]) for port in service.get("expose", [])}


def _healthcheck_url(service: Mapping[str, Any]) -> tuple[int, str]:
    """The port and path of the loopback URL a service's health check asks."""
    command = " ".join(map(str, service["healthcheck"]["test"]))
    match = re.search(r"http://127\.0\.0\.1:(\d+)(/[\w/-]*)", command)
    assert match is not None, f"no loopback URL in the health check {command!r}"
    return int(match.group(1)), match.group(2)


def _seconds(duration: str) -> float:
    """A Compose duration (1m30s, 20s, 500ms) in seconds."""
    units = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001, "us": 1e-6}
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|us|h|m|s)", duration)
    assert "".join(n + u for n, u in parts) == duration, f"not a duration: {duration!r}"
    return sum(float(n) * units[u] for n, u in parts)


# --- the compose file ----------------------------------------------------------------------------------------


def test_the_compose_file_is_valid_against_the_compose_schema(compose: dict[str, Any]) -> None:
    """docker-compose.yml validates against the Compose specification, with the draft the schema declares."""
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    # The schema says https://json-schema.org/draft-07/schema, a spelling jsonschema does not look up
    # (it knows http://…#); a newer copy of the schema declaring another draft needs another validator.
    assert re.fullmatch(r"https?://json-schema\.org/draft-07/schema#?", schema["$schema"])
    Draft7Validator.check_schema(schema)
    errors = sorted(Draft7Validator(schema).iter_errors(compose), key=lambda e: list(e.absolute_path))
    assert [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in errors] == []


def test_the_schema_rejects_what_compose_would_refuse(compose: dict[str, Any]) -> None:
    """The validation above can fail: a misspelt service key is an error under the same schema."""
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    broken = {**compose, "services": {**compose["services"], "target": {"image": "x", "helthcheck": {}}}}
    assert any("helthcheck" in e.message for e in Draft7Validator(schema).iter_errors(broken))


def test_the_file_has_the_four_services_and_no_version_key(compose: dict[str, Any]) -> None:
    """cliffwatch, PostgreSQL, Toxiproxy and the built-in target; the obsolete top-level version is left out."""
    assert set(compose["services"]) == SERVICES
    assert "version" not in compose


def test_toxiproxy_is_the_pinned_upstream_image(services: dict[str, dict[str, Any]]) -> None:
    """The Toxiproxy cliffwatch is tested with (2.12.0), and PostgreSQL 15."""
    assert services["toxiproxy"]["image"] == "ghcr.io/shopify/toxiproxy:2.12.0"
    assert services["postgres"]["image"] == "postgres:15"


def test_the_target_runs_the_image_cliffwatch_builds(services: dict[str, dict[str, Any]]) -> None:
    """The built-in target is the cliffwatch image with another command, built from the repository's Dockerfile."""
    cliffwatch, target = services["cliffwatch"], services["target"]
    assert cliffwatch["build"] == "."
    assert target["image"] == cliffwatch["image"]
    assert target.get("build") == cliffwatch["build"]  # so `up` builds it rather than trying to pull it
    assert target["command"][:2] == ["cliffwatch", "target"]


@pytest.mark.parametrize("name", ["cliffwatch", "target"])
def test_every_cliffwatch_variable_is_a_real_setting(services: dict[str, dict[str, Any]], name: str) -> None:
    """A CLIFFWATCH_ variable the service does not know would be silently ignored: none is set."""
    unknown = {key for key in _environment(services[name]) if key.startswith("CLIFFWATCH_")} - SETTING_VARIABLES
    assert unknown == set()


@pytest.mark.parametrize("name", ["cliffwatch", "target"])
def test_the_environment_parses_as_settings(
    services: dict[str, dict[str, Any]], image_env: dict[str, str], name: str
) -> None:
    """Each container of the cliffwatch image starts with valid settings (both commands read them first)."""
    _settings(services[name], image_env)  # raises SettingsInvalid naming every bad value


def test_the_published_port_is_the_one_the_api_listens_on(
    services: dict[str, dict[str, Any]], image_env: dict[str, str]
) -> None:
    """The container port published is CLIFFWATCH_LISTEN_PORT, on an address reachable from outside."""
    settings = _settings(services["cliffwatch"], image_env)
    assert _container_ports(services["cliffwatch"]) == [settings.listen_port]
    assert settings.listen_host == "0.0.0.0"


def test_the_database_url_names_the_postgres_service_and_its_credentials(
    services: dict[str, dict[str, Any]], image_env: dict[str, str]
) -> None:
    """CLIFFWATCH_DATABASE_URL reaches the postgres service with the user, password and database it creates."""
    settings = _settings(services["cliffwatch"], image_env)
    url = urlsplit(settings.database_url)
    postgres = services["postgres"]
    env = _environment(postgres)
    assert url.scheme == "postgresql+asyncpg"
    assert url.hostname == "postgres"
    assert (url.port or POSTGRES_PORT) == POSTGRES_PORT
    assert "PGPORT" not in env
    assert POSTGRES_PORT in _exposed(postgres)
    assert unquote(url.username or "") == env["POSTGRES_USER"]
    assert unquote(url.password or "") == env["POSTGRES_PASSWORD"]
    assert url.path.lstrip("/") == env["POSTGRES_DB"]
    check = postgres["healthcheck"]["test"]
    assert "pg_isready" in check
    assert f"--username={env['POSTGRES_USER']}" in check
    assert f"--dbname={env['POSTGRES_DB']}" in check


def test_the_toxiproxy_url_names_the_toxiproxy_service_and_its_api_port(
    services: dict[str, dict[str, Any]], image_env: dict[str, str]
) -> None:
    """CLIFFWATCH_TOXIPROXY_URL is the toxiproxy service's API, on the port it listens on and checks."""
    settings = _settings(services["cliffwatch"], image_env)
    assert settings.toxiproxy_url is not None
    url = urlsplit(settings.toxiproxy_url)
    toxiproxy = services["toxiproxy"]
    flags = dict(arg.lstrip("-").partition("=")[::2] for arg in toxiproxy.get("command", []))
    api_port = int(flags.get("port", TOXIPROXY_DEFAULT_PORT))
    assert url.hostname == "toxiproxy"
    assert url.port == api_port
    assert flags.get("host") == "0.0.0.0"  # reachable from the other containers
    assert api_port in _exposed(toxiproxy)
    check = toxiproxy["healthcheck"]["test"]
    assert check[:2] == ["CMD", "/toxiproxy-cli"]  # exec form: the image has no shell
    assert f"http://127.0.0.1:{api_port}" in check


def test_every_service_has_a_healthcheck(services: dict[str, dict[str, Any]]) -> None:
    """Each service says when it is ready, so depends_on can wait for it."""
    for name, service in services.items():
        check = service.get("healthcheck", {})
        assert not check.get("disable", False), name
        assert check.get("test"), name
        assert check["test"][0] in ("CMD", "CMD-SHELL"), name


def test_cliffwatch_waits_for_its_dependencies_to_be_healthy(services: dict[str, dict[str, Any]]) -> None:
    """cliffwatch starts once the database and Toxiproxy answer, not merely once their containers exist."""
    depends_on = services["cliffwatch"]["depends_on"]
    assert isinstance(depends_on, dict)  # the list form cannot carry a condition
    assert {"postgres", "toxiproxy"} <= set(depends_on)
    for name, condition in depends_on.items():
        assert condition["condition"] == "service_healthy", name
    for name, service in services.items():
        for dependency, condition in (service.get("depends_on") or {}).items():
            assert condition["condition"] == "service_healthy", f"{name} → {dependency}"


def test_the_health_checks_ask_the_ports_the_programs_listen_on(
    services: dict[str, dict[str, Any]], image_env: dict[str, str]
) -> None:
    """cliffwatch's check asks /healthz on its listen port; the target's asks /health on the port its command gives."""
    settings = _settings(services["cliffwatch"], image_env)
    assert _healthcheck_url(services["cliffwatch"]) == (settings.listen_port, "/healthz")
    target = cli._parser().parse_args(services["target"]["command"][1:])
    assert _healthcheck_url(services["target"]) == (target.port, "/health")
    assert target.port in _exposed(services["target"])


def test_the_target_service_is_in_the_allowlist(services: dict[str, dict[str, Any]], image_env: dict[str, str]) -> None:
    """Runs may aim at the target service by name and port; the allowlist does not open up the internet."""
    settings = _settings(services["cliffwatch"], image_env)
    target = cli._parser().parse_args(services["target"]["command"][1:])
    assert target.host == "0.0.0.0"  # reachable from the cliffwatch container
    assert settings.allowlist.check("target", target.port, addresses=[]) is None
    assert settings.allowlist.check("127.0.0.1", target.port, addresses=[]) is None
    assert settings.allowlist.check("example.com", 443, addresses=["93.184.215.14"]) is not None
    assert settings.allowlist.check("postgres", POSTGRES_PORT, addresses=["172.18.0.2"]) is not None


def test_the_state_directory_is_a_named_volume(
    compose: dict[str, Any], services: dict[str, dict[str, Any]], image_env: dict[str, str]
) -> None:
    """CLIFFWATCH_STATE_DIR and PostgreSQL's data survive the containers, on volumes the file declares."""
    settings = _settings(services["cliffwatch"], image_env)
    declared = set(compose.get("volumes") or {})
    mounts = {
        name: {str(v).split(":")[1]: str(v).split(":")[0] for v in service.get("volumes", [])}
        for name, service in services.items()
    }
    assert mounts["cliffwatch"].get(str(settings.state_dir)) in declared
    assert mounts["postgres"].get("/var/lib/postgresql/data") in declared


def test_docker_stop_waits_longer_than_the_shutdown_grace(
    services: dict[str, dict[str, Any]], image_env: dict[str, str]
) -> None:
    """Runs get CLIFFWATCH_SHUTDOWN_GRACE_S after SIGTERM to take their faults off; Docker's SIGKILL comes later."""
    settings = _settings(services["cliffwatch"], image_env)
    assert _seconds(services["cliffwatch"]["stop_grace_period"]) > settings.shutdown_grace_s


# --- the Dockerfile ------------------------------------------------------------------------------------------


def test_the_image_environment_is_made_of_real_settings(image_env: dict[str, str]) -> None:
    """The image's CLIFFWATCH_ variables are settings, they parse, and the API listens on every interface."""
    assert {key for key in image_env if key.startswith("CLIFFWATCH_")} - SETTING_VARIABLES == set()
    settings = Settings.from_env(image_env)
    assert settings.listen_host == "0.0.0.0"
    assert settings.state_dir.is_absolute()


def test_the_dockerfile_exposes_and_serves_what_the_settings_say(
    dockerfile: list[tuple[str, str]], image_env: dict[str, str]
) -> None:
    """Slim Python 3.11, a non-root user, EXPOSE of the listen port, and `cliffwatch serve` by default."""
    settings = Settings.from_env(image_env)
    assert _one(dockerfile, "FROM") == "python:3.11-slim"
    assert _one(dockerfile, "USER") not in ("root", "0")
    assert _one(dockerfile, "EXPOSE") == str(settings.listen_port)
    assert json.loads(_one(dockerfile, "CMD")) == ["cliffwatch", "serve"]


def test_the_dockerfile_installs_without_dev_extras_and_ships_the_data(dockerfile: list[tuple[str, str]]) -> None:
    """A regular install of the package only; the bundled scenarios are found by the installed package."""
    text = DOCKERFILE.read_text(encoding="utf-8")
    installs = [found.strip() for found in re.findall(r"pip install ([^\n&\\]+)", text)]
    assert installs == ["."]  # not -e, not .[dev]
    assert "bundled_names()" in text  # the build fails when the installed package cannot find the scenarios
    for data in ("scenarios", "migrations", "alembic.ini"):
        assert f"/app/{data}" in text, f"{data} is not put in /app"


@pytest.fixture
def health_server() -> Iterator[tuple[int, list[int]]]:
    """A local HTTP server answering GET /healthz with the status put in the list (200 at first)."""
    status = [200]

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(status[0] if self.path == "/healthz" else 404)
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1], status
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def _run_healthcheck(dockerfile: list[tuple[str, str]], port: int) -> int:
    command = _one(dockerfile, "HEALTHCHECK").partition("CMD ")[2]
    argv = json.loads(command)
    assert argv[:2] == ["python", "-c"], "slim has no curl: the check should use Python"
    environment = {"CLIFFWATCH_LISTEN_PORT": str(port), "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, *argv[1:]], env=environment, capture_output=True, timeout=30)
    return done.returncode


def test_the_image_healthcheck_passes_when_healthz_answers(
    dockerfile: list[tuple[str, str]], health_server: tuple[int, list[int]]
) -> None:
    """The HEALTHCHECK command asks /healthz on CLIFFWATCH_LISTEN_PORT and succeeds on a 200."""
    port, _ = health_server
    assert _run_healthcheck(dockerfile, port) == 0


def test_the_image_healthcheck_fails_on_an_error_status_or_no_server(
    dockerfile: list[tuple[str, str]], health_server: tuple[int, list[int]]
) -> None:
    """A 503 from /healthz, or nothing listening, makes the HEALTHCHECK command fail."""
    port, status = health_server
    status[0] = 503
    assert _run_healthcheck(dockerfile, port) != 0
    with ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler) as closed:
        free_port = closed.server_address[1]
    assert _run_healthcheck(dockerfile, free_port) != 0


def test_the_image_healthcheck_defaults_to_the_default_listen_port(dockerfile: list[tuple[str, str]]) -> None:
    """Without CLIFFWATCH_LISTEN_PORT the check asks the port the service then listens on."""
    default_port = Settings.from_env({}).listen_port
    assert f"os.environ.get('CLIFFWATCH_LISTEN_PORT', '{default_port}')" in _one(dockerfile, "HEALTHCHECK")


# --- the operations guide ------------------------------------------------------------------------------------


def test_every_setting_is_in_the_operations_guide() -> None:
    """docs/operations.md names every variable SPECS declares, in its table, with its config file key."""
    text = OPERATIONS.read_text(encoding="utf-8")
    rows = {line.split("|")[1].strip(): line for line in text.splitlines() if line.startswith("| `CLIFFWATCH_")}
    missing = [
        spec.env for spec in SPECS if f"`{spec.env}`" not in rows or f"`{spec.key}`" not in rows[f"`{spec.env}`"]
    ]
    assert missing == []
    assert "CLIFFWATCH_CONFIG" in text
