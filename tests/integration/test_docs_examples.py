"""The examples in README.md and docs/*.md are tests: each is run or validated (``docs_examples_kit``), or marked
illustrative with its reason; an unmarked example nothing checks fails. A new page is under the rule as soon
as it exists."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from test_service_api import served_instance

from docs_examples_kit import REPO, Service, check_document

pytestmark = pytest.mark.slow

DOCUMENTS = ("README.md", *sorted(f"docs/{p.name}" for p in (REPO / "docs").glob("*.md")))


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    scratch = tmp_path_factory.mktemp("docs-service")
    database = f"sqlite+aiosqlite:///{scratch / 'cliffwatch.db'}"
    with served_instance(database, scratch) as (base, token):
        yield Service(base, token, env={"CLIFFWATCH_DATABASE_URL": database, "CLIFFWATCH_STATE_DIR": str(scratch)})


@pytest.mark.parametrize("document", DOCUMENTS)
def test_every_example_is_checked_or_marked_illustrative(document: str, service: Service) -> None:
    found = check_document(REPO / document, service)
    assert found.failures == []
    assert all(reason.strip() for _, reason in found.illustrative)


def test_a_readme_curl_without_its_json_content_type_fails(tmp_path: Path, service: Service) -> None:
    """The README's first API call, with ``-d`` (a form content type) for ``--json``: the API answers 415
    and the example fails — the drift this test exists for."""
    readme = (REPO / "README.md").read_text()
    body = '\'{"scenario": "burst-storm"}\''
    assert f"--json {body}" in readme
    broken = tmp_path / "README.md"
    broken.write_text(readme.replace(f"--json {body}", f"-d {body}"))
    found = check_document(broken, service)
    assert len(found.failures) == 1
    assert "415" in found.failures[0] or "application/json" in found.failures[0]


def test_an_unmarked_block_nothing_checks_fails_and_a_reasonless_skip_too(tmp_path: Path, service: Service) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "```\nsome output\n```\n\n"
        "```text\nmore output\n```\n\n"
        "<!-- skip: next -->\n```\nskipped without a reason\n```\n\n"
        '<!-- skip: next "  " -->\n```\nskipped with a blank reason\n```\n\n'
        '<!-- skip: next "the output of one run: its figures differ every time" -->\n```\nfigures\n```\n'
    )
    found = check_document(page, service)
    assert [f.split(": ", 1)[0] for f in found.failures] == ["page.md:1", "page.md:5", "page.md:9", "page.md:15"]
    assert found.illustrative == [(20, "the output of one run: its figures differ every time")]


def test_shell_and_yaml_examples_fail_when_they_drift(tmp_path: Path, service: Service) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "```sh\ncliffwatch run burst-storm --no-such-flag\n```\n\n"
        "```sh\ncliffwatch run no-such-scenario\n```\n\n"
        "```sh\nrm -rf /tmp/x\n```\n\n"
        "```yaml\nslo: {e2e_ms: -1}\n```\n\n"
        "```sh\ncliffwatch run burst-storm --seed 7   # parsed, not run\n```\n\n"
        "```yaml\nclient: {retry: {policy: exponential, max_retries: 2}}\n```\n"
    )
    found = check_document(page, service)
    assert len(found.failures) == 4, found.failures
    assert "--no-such-flag" in found.failures[0]
    assert "no-such-scenario" in found.failures[1]
    assert "no rule checks `rm`" in found.failures[2]
    assert "e2e_ms" in found.failures[3]
    assert found.checked == [17, 21]


def test_api_examples_fail_when_they_drift(tmp_path: Path) -> None:
    """Against the OpenAPI document: an unknown path, a body of the wrong shape, an undocumented status and a
    response missing a member fail; an elided body (``"…": "…"``) and a shortened string pass."""
    page = tmp_path / "page.md"
    page.write_text(
        '```http\nPOST /api/v1/no-such-thing\n\n{"a": 1}\n```\n\n'
        '```http\nPOST /api/v1/runs\n\n{"scenario": 7}\n```\n\n'
        '```http\nPOST /api/v1/tokens\n\n{"name": "ci", "role": "operator"}\n\nHTTP/1.1 418 I\'m a teapot\n```\n\n'
        '### `GET /api/v1/runs`\n\n```json\n{"runs": [{"id": "d0e1cdefc6e5"}], "next_cursor": null}\n```\n\n'
        '```json\n{"runs": [{"id": "d0e1…", "status": "queued", "…": "…"}, "…"], "next_cursor": null}\n```\n'
    )
    found = check_document(page, Service("http://127.0.0.1:1", "unused"))
    assert [f.split(": ", 1)[0] for f in found.failures] == ["page.md:1", "page.md:7", "page.md:13", "page.md:23"]
    assert "/api/v1/no-such-thing is not in the OpenAPI document" in found.failures[0]
    assert "scenario" in found.failures[1]
    assert "418 is not a documented answer" in found.failures[2]
    assert "is a required property" in found.failures[3]
    assert found.checked == [27]


def test_settings_installs_bench_commands_and_config_files_fail_when_they_drift(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "```sh\nCLIFFWATCH_NO_SUCH_SETTING=1\nFOO=1\n```\n\n"
        "```sh\nCLIFFWATCH_MAX_WORKERS=0\n```\n\n"
        "```sh\npip install 'cliffwatch[no-such-extra]'\n```\n\n"
        "```sh\n.venv/bin/python bench/whole_run.py --no-such-flag 3\n```\n\n"
        "```yaml\nlog_format: yaml\n```\n\n"
        "```yaml\nservices:\n  cliffwatch:\n    ports: 8080\n```\n\n"
        "```sh\nCLIFFWATCH_MAX_WORKERS=4\npip install 'cliffwatch[ray]'\n"
        ".venv/bin/python bench/whole_run.py --paths cli\n```\n"
    )
    found = check_document(page, Service("http://127.0.0.1:1", "unused"))
    assert len(found.failures) == 6, found.failures
    assert "CLIFFWATCH_NO_SUCH_SETTING is not a cliffwatch setting" in found.failures[0]
    assert "FOO is not a cliffwatch setting" in found.failures[0]
    assert "CLIFFWATCH_MAX_WORKERS" in found.failures[1]
    assert "no such extra: no-such-extra" in found.failures[2]
    assert "has no --no-such-flag" in found.failures[3]
    assert "log_format" in found.failures[4]
    assert "ports" in found.failures[5]
    assert found.checked == [28]
