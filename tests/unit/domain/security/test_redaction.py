"""Redaction of documents: every literal credential masked with one mask, kept apart, put back for the run."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from cliffwatch.domain.errors import CliffwatchError, TargetNotAllowed, TargetUnreachable
from cliffwatch.domain.scenario.scenario import parse_scenario
from cliffwatch.domain.security.masking import (
    MASK,
    header_pattern,
    mask_headers_in_text,
    mask_url,
    url_credentials,
    without_password,
)
from cliffwatch.domain.security.redaction import (
    DEFAULT_RULES,
    Credential,
    RedactionRules,
    content_hash,
    redact_document,
    restore,
)

KEY = b"k" * 32
CALM = {"name": "calm", "role": "baseline", "duration_s": 1, "arrival": {"process": "constant", "rate": 1}}


def document(**target: Any) -> dict[str, Any]:
    return {
        "name": "creds",
        "description": "wiki at https://wiki:hunter2@docs.example.com/page",
        "target": {
            "url": "http://alice:s3cret@127.0.0.1:8000",
            "request": {
                "model": "m",
                "headers": {
                    "x-api-key": "sk-one",
                    "COOKIE": "session=abc",
                    "Proxy-Authorization": "Basic cHJveHk=",
                    "X-Tenant-Key": "tenant-7",
                    "X-Trace": "1",
                    "Api-Key": {"secret": "env:TARGET_KEY"},
                },
            },
            **target,
        },
        "proxies": [{"name": "llm", "upstream": "127.0.0.1:8000"}],
        "slo": {"e2e_ms": 500, "timeout_ms": 1000},
        "phases": [CALM],
    }


def test_sensitive_headers_and_url_passwords_are_masked_and_kept_apart() -> None:
    """Header names match case-insensitively; references, other headers and URLs without passwords stay."""
    original = document()
    redaction = redact_document(original)
    masked = redaction.document
    headers = masked["target"]["request"]["headers"]

    assert headers == {"x-api-key": MASK, "COOKIE": MASK, "Proxy-Authorization": MASK, "X-Tenant-Key": "tenant-7",
                       "X-Trace": "1", "Api-Key": {"secret": "env:TARGET_KEY"}}  # fmt: skip
    assert masked["target"]["url"] == "http://alice:***@127.0.0.1:8000"
    assert masked["description"] == "wiki at https://wiki:***@docs.example.com/page"
    assert masked["proxies"] == original["proxies"]
    assert original == document()  # the caller's document is not changed
    assert {c.path for c in redaction.credentials} == {
        ("description",), ("target", "url"), ("target", "request", "headers", "x-api-key"),
        ("target", "request", "headers", "COOKIE"), ("target", "request", "headers", "Proxy-Authorization"),
    }  # fmt: skip
    assert restore(masked, redaction.credentials) == original


def test_a_setting_adds_header_names() -> None:
    """Names added by the setting are masked like the built-in ones."""
    masked = redact_document(document(), RedactionRules.adding(["x-tenant-key"])).document

    assert masked["target"]["request"]["headers"]["X-Tenant-Key"] == MASK


def test_a_document_without_credentials_is_left_as_it_is_and_keeps_its_hash() -> None:
    """No credential: the same document, and the hash it always had, with or without a key."""
    plain = document()
    plain["target"]["url"] = "http://127.0.0.1:8000"
    plain["description"] = "x"
    plain["target"]["request"]["headers"] = {"X-Trace": "1"}
    redaction = redact_document(plain)

    assert redaction.document == plain
    assert redaction.credentials == ()
    assert redaction.content_hash(KEY) == redaction.content_hash() == content_hash(plain)


def test_keyed_hashes_tell_credentials_apart_and_unkeyed_ones_do_not() -> None:
    """Under the store's key a changed credential is a new version; the hash is not that of the cleartext."""
    one, other = document(), document()
    other["target"]["request"]["headers"]["x-api-key"] = "sk-two"
    first, second = redact_document(one), redact_document(other)

    assert first.document == second.document
    assert first.content_hash(KEY) != second.content_hash(KEY)
    assert first.content_hash(KEY) == redact_document(copy.deepcopy(one)).content_hash(KEY)
    assert first.content_hash(KEY) != first.content_hash(b"another key")
    assert first.content_hash() == second.content_hash() == content_hash(first.document)
    assert content_hash(one) not in (first.content_hash(KEY), first.content_hash())
    assert parse_scenario(one).content_hash == first.content_hash()


def test_the_mask_itself_where_a_credential_belongs_is_a_problem() -> None:
    """A masked document read back and sent again would send the mask: each such place is named."""
    shown = redact_document(document()).document
    again = redact_document(shown)

    assert [p.path for p in again.problems] == [
        "description", "target.url", "target.request.headers.x-api-key", "target.request.headers.COOKIE",
        "target.request.headers.Proxy-Authorization",
    ]  # fmt: skip
    assert "the mask cliffwatch shows in place of a credential" in again.problems[0].message


def test_credentials_that_do_not_fit_the_document_are_refused() -> None:
    """Putting a credential back where the document shows no mask is an error, never a silent overwrite."""
    masked = redact_document(document()).document
    with pytest.raises(CliffwatchError, match=r"does not fit its document at target\.request\.headers\.X-Trace"):
        restore(masked, [Credential(path=("target", "request", "headers", "X-Trace"), value="x")])
    with pytest.raises(CliffwatchError, match=r"at phases\[3\]\.name"):
        restore(masked, [Credential(path=("phases", 3, "name"), value="x")])


@pytest.mark.parametrize(
    ("url", "shown", "found"),
    [
        ("http://u:p@h:1/x", "http://u:***@h:1/x", ["p"]),
        ("http://u:p@ss@h/x", "http://u:***@h/x", ["p@ss"]),
        ("https://tok3n@h/", "https://***@h/", ["tok3n"]),
        ("http://h:8080/a@b", "http://h:8080/a@b", []),
        ("http://@h/", "http://@h/", []),
        ("see http://a:b@h and ws://c:d@i/", "see http://a:***@h and ws://c:***@i/", ["b", "d"]),
        ("no url user@example.com", "no url user@example.com", []),
    ],
)
def test_urls_lose_their_passwords(url: str, shown: str, found: list[str]) -> None:
    """A password (or a user part alone, which is then a token) is masked; an "@" in a path is not userinfo."""
    assert mask_url(url) == shown
    assert url_credentials(url) == found


@pytest.mark.parametrize(
    "error",
    [
        TargetUnreachable("http://alice:pw-9@127.0.0.1:8000/v1", "connect to http://alice:pw-9@127.0.0.1:8000 refused"),
        TargetNotAllowed("http://alice:pw-9@10.0.0.1/", "http://alice:pw-9@10.0.0.1/ resolves outside the allowlist"),
    ],
    ids=["unreachable", "not allowed"],
)
def test_an_error_about_a_target_never_quotes_its_password(error: CliffwatchError) -> None:
    """The message (what the worker stores as a failed run's reason, and the API and dashboard show) masks the
    URL's password as the error's fields do, wherever the URL sits in it."""
    assert "pw-9" not in str(error)
    assert "alice:***@" in str(error)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql+asyncpg://cw:p/w@db:5432/cw", "postgresql+asyncpg://cw:***@db:5432/cw"),
        ("postgresql+asyncpg://cw@db/cw", "postgresql+asyncpg://cw@db/cw"),
        ("sqlite+aiosqlite:///./cliffwatch.db", "sqlite+aiosqlite:///./cliffwatch.db"),
    ],
)
def test_a_database_url_loses_its_password_even_one_with_a_slash(url: str, shown: str) -> None:
    """One URL taken whole: its user part ends at the last "@", and a user without a password is shown."""
    assert without_password(url) == shown


def test_header_values_in_free_text_are_masked() -> None:
    """`Authorization: …`, `'x-api-key': '…'` and `cookie=…` in a message lose their values: a quoted one to its
    quote, a bare one to the end of its line (or a quote, comma or brace), rather than too little."""
    pattern = header_pattern(DEFAULT_RULES.sensitive_headers)
    text = "sent Authorization: Bearer sk-1 now\n{'X-Api-Key': 'sk-2', 'accept': 'a'} and cookie=c1; c2=x"

    masked = "sent Authorization: ***\n{'X-Api-Key': '***', 'accept': 'a'} and cookie=***"
    assert mask_headers_in_text(text, pattern) == masked


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("/v1/x?api_key=sk-1&page=2", "/v1/x?api_key=***&page=2"),
        ("/v1/x?page=2&KEY=AIza-1#top", "/v1/x?page=2&KEY=***#top"),
        (
            "https://bucket.s3/o?X-Amz-Signature=abc&X-Amz-Date=1",
            "https://bucket.s3/o?X-Amz-Signature=***&X-Amz-Date=1",
        ),
        ("https://acct.blob/c?sv=1&sig=Zm9v%3D", "https://acct.blob/c?sv=1&sig=***"),
        ("/v1/x?monkey=1&keys=2&api_key=", "/v1/x?monkey=1&keys=2&api_key="),  # other names, and nothing to mask
        ("no query at all: key=value", "no query at all: key=value"),
    ],
)
def test_sensitive_query_parameters_are_masked_in_any_string(text: str, shown: str) -> None:
    assert DEFAULT_RULES.mask_text(text) == shown


def test_query_and_body_credentials_are_masked_kept_apart_and_put_back_for_the_run() -> None:
    """A key in `path`, a sensitive `query` value and a body string under a sensitive key (`extra_body` too) are
    masked; put back, the document is the one sent; a setting adds parameter names."""
    written = document()
    written["target"]["request"] |= {
        "path": "/v1/chat/completions?api_key=sk-path&x=1",
        "query": {"access_token": "tok-q", "limit": "10", "Custom": "c-1"},
        "extra_body": {"token": "tok-body", "nested": [{"client_secret": "cs-1"}], "top_k": 4},
    }
    rules = RedactionRules.adding((), query=("custom",))
    redaction = redact_document(written, rules)
    request = redaction.document["target"]["request"]

    assert request["path"] == "/v1/chat/completions?api_key=***&x=1"
    assert request["query"] == {"access_token": MASK, "limit": "10", "Custom": MASK}
    assert request["extra_body"] == {"token": MASK, "nested": [{"client_secret": MASK}], "top_k": 4}
    assert restore(redaction.document, redaction.credentials) == written
    assert redact_document(written).document["target"]["request"]["query"]["Custom"] == "c-1"


def test_a_credential_masked_under_other_rules_still_fits_its_document() -> None:
    """A version stored before a setting named more parameters still gets its credentials back."""
    stored = {"path": "/v1?api_key=***&custom=c-1"}
    credential = Credential(path=("path",), value="/v1?api_key=sk-1&custom=c-1")
    assert restore(stored, [credential]) == {"path": "/v1?api_key=sk-1&custom=c-1"}
    with pytest.raises(CliffwatchError, match="does not fit"):
        restore({"path": "/v2?api_key=***"}, [credential])


def test_a_body_masks_what_names_a_credential_and_leaves_keys_that_mostly_do_not() -> None:
    """`key` and `sig` are masked in a query but are ordinary words in a body (a key-value store's `key`); a body's
    `token`, `password`, a header's name, and a parameter name the settings add are credentials there too."""
    written = document()
    written["target"]["request"]["extra_body"] = {"key": "user-17", "sig": "v1", "token": "t-1", "Password": "p-1",
                                                  "x-api-key": "k-1", "tenant_secret": "ts-1"}  # fmt: skip
    masked = redact_document(written, RedactionRules.adding((), query=("tenant_secret",))).document
    assert masked["target"]["request"]["extra_body"] == {
        "key": "user-17",
        "sig": "v1",
        "token": MASK,
        "Password": MASK,
        "x-api-key": MASK,
        "tenant_secret": MASK,
    }


def test_a_webhooks_url_is_a_credential_kept_apart_and_put_back() -> None:
    """A Slack incoming webhook's path is its secret: a scenario's (or a suite's inline scenario's) webhook URL is
    masked where documents are shown and put back where they are run."""
    slack = {"webhook": "https://hooks.slack.com/services/T0/B0/XYZ", "format": "slack"}
    inline = {"notify": [{"webhook": "http://127.0.0.1:9/hook?token=abc"}]}
    document = {"name": "s", "notify": [slack], "experiments": [{"scenario": inline}]}
    redacted = redact_document(document)
    assert redacted.document["notify"] == [{"webhook": f"https://hooks.slack.com/{MASK}", "format": "slack"}]
    assert redacted.document["experiments"][0]["scenario"]["notify"][0]["webhook"] == f"http://127.0.0.1:9/{MASK}"
    assert restore(redacted.document, redacted.credentials) == document
    assert redact_document({"notify": [{"webhook": "http://127.0.0.1:9/"}]}).credentials == ()  # nothing secret
    sent_back = redact_document(redacted.document)
    assert [p.path for p in sent_back.problems] == ["notify[0].webhook", "experiments[0].scenario.notify[0].webhook"]
