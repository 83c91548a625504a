"""The real secret resolver: allowed variables from what config.py handed over, files in allowed directories."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cliffwatch.adapters.runtime.secret_sources import MAX_SECRET_BYTES, LocalSecrets
from cliffwatch.config import Settings
from cliffwatch.domain.security.secrets import SecretRef, SecretScheme, SecretUnavailable

KEY = "sk-live-0123456789"


def env(name: str) -> SecretRef:
    return SecretRef(scheme=SecretScheme.ENV, name=name)


def file(path: Path | str) -> SecretRef:
    return SecretRef(scheme=SecretScheme.FILE, name=str(path))


def reason(secrets: LocalSecrets, reference: SecretRef) -> str:
    with pytest.raises(SecretUnavailable) as caught:
        secrets.resolve(reference)
    assert KEY not in str(caught.value)
    return str(caught.value)


def test_variables_are_read_from_what_config_handed_over_when_allowed() -> None:
    """Settings keep only the variables the setting allows; the resolver says set, unset or not allowed."""
    settings = Settings.from_env({"TARGET_API_KEY": KEY, "AWS_SECRET_ACCESS_KEY": "aws", "HOME": "/root",
                                  "CLIFFWATCH_SECRET_ENV": "TARGET_*,OPENAI_API_KEY"})  # fmt: skip
    assert dict(settings.secret_environment) == {"TARGET_API_KEY": KEY}
    assert KEY not in repr(settings)
    secrets = LocalSecrets(environment=settings.secret_environment, env_names=settings.secret_env, directories=())

    assert secrets.resolve(env("TARGET_API_KEY")) == KEY
    assert reason(secrets, env("OPENAI_API_KEY")) == "env:OPENAI_API_KEY is not set"
    assert reason(secrets, env("AWS_SECRET_ACCESS_KEY")) == (
        "env:AWS_SECRET_ACCESS_KEY is not a variable scenarios may read (CLIFFWATCH_SECRET_ENV: TARGET_*, "
        "OPENAI_API_KEY)"
    )


def test_by_default_only_target_variables_may_be_read() -> None:
    """The default lets TARGET_* through and nothing else, cliffwatch's own settings least of all."""
    settings = Settings.from_env({"TARGET_KEY": KEY, "CLIFFWATCH_DATABASE_URL": "postgresql+asyncpg://u:pw@h/db"})

    assert dict(settings.secret_environment) == {"TARGET_KEY": KEY}


def test_a_file_is_read_with_one_trailing_newline_stripped(tmp_path: Path) -> None:
    """The `_FILE` convention: the file's text, less the newline an editor or `echo` leaves (only one)."""
    (tmp_path / "key").write_text(f"{KEY}\n")
    (tmp_path / "crlf").write_bytes(f"{KEY}\r\n".encode())
    (tmp_path / "two").write_text(f"{KEY}\n\n")
    secrets = LocalSecrets(environment={}, env_names=(), directories=(tmp_path,))

    assert secrets.resolve(file(tmp_path / "key")) == KEY
    assert secrets.resolve(file(tmp_path / "crlf")) == KEY
    assert secrets.resolve(file(tmp_path / "two")) == f"{KEY}\n"


def test_a_kubernetes_style_symlinked_secret_is_read_inside_its_directory(tmp_path: Path) -> None:
    """Secrets mounted through symlinks (`key` → `..data/key`) are followed, and stay inside the directory."""
    data = tmp_path / "..2026_12_01" / "key"
    data.parent.mkdir()
    data.write_text(KEY)
    (tmp_path / "..data").symlink_to(data.parent.name)
    (tmp_path / "key").symlink_to("..data/key")
    secrets = LocalSecrets(environment={}, env_names=(), directories=(tmp_path,))

    assert secrets.resolve(file(tmp_path / "key")) == KEY


def test_files_outside_the_allowed_directories_are_not_read(tmp_path: Path) -> None:
    """A path outside (directly, by `..`, or by a symlink pointing out) is refused before it is opened."""
    allowed = tmp_path / "secrets"
    allowed.mkdir()
    outside = tmp_path / "private"
    outside.write_text(KEY)
    (allowed / "escape").symlink_to(outside)
    secrets = LocalSecrets(environment={}, env_names=(), directories=(allowed,))
    refusal = f"is outside the directories secrets may be read from (CLIFFWATCH_SECRET_DIRS: {allowed})"

    assert reason(secrets, file(outside)) == f"file:{outside} {refusal}"
    assert reason(secrets, file(allowed / ".." / "private")).endswith(refusal)
    assert reason(secrets, file(allowed / "escape")).endswith(refusal)
    assert reason(LocalSecrets(environment={}, env_names=(), directories=()), file("/etc/passwd")).endswith(
        "(CLIFFWATCH_SECRET_DIRS: none)"
    )


def test_what_is_not_a_small_readable_text_file_is_refused(tmp_path: Path) -> None:
    """Missing, a directory, a FIFO (which would block), too large, unreadable or not UTF-8: each says so."""
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "dir").mkdir()
    (tmp_path / "big").write_bytes(b"x" * (MAX_SECRET_BYTES + 1))
    (tmp_path / "binary").write_bytes(b"\xff\xfe")
    locked = tmp_path / "locked"
    locked.write_text(KEY)
    locked.chmod(0)
    secrets = LocalSecrets(environment={}, env_names=(), directories=(tmp_path,))

    assert reason(secrets, file(tmp_path / "missing")).endswith("does not exist")
    assert reason(secrets, file(tmp_path / "dir")).endswith("is not a regular file")
    assert reason(secrets, file(tmp_path / "fifo")).endswith("is not a regular file")
    assert reason(secrets, file(tmp_path / "big")).endswith("is larger than 64 KiB")
    assert reason(secrets, file(tmp_path / "binary")).endswith("is not UTF-8 text")
    if os.geteuid() != 0:  # root reads any file
        assert reason(secrets, file(locked)).endswith("cannot be read (Permission denied)")
