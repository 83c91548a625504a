"""The real ``SecretResolver``: environment variables config handed over, and files in allowed directories.

Which variables and which directories a scenario may read is the operator's (``CLIFFWATCH_SECRET_ENV``,
``CLIFFWATCH_SECRET_DIRS``): a scenario is written by whoever may submit one, and without these limits it
could send any variable of the service (``env:AWS_SECRET_ACCESS_KEY``) or any file it can read
(``file:/proc/self/environ``) to a target its author watches. cliffwatch's own settings are never readable.

A file is read only when it is a regular file (a FIFO or a device would block or never end), at most
``MAX_SECRET_BYTES``, in UTF-8; one trailing newline is stripped, as ``echo`` and editors leave one.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping, Sequence
from pathlib import Path

from cliffwatch.domain.security.secrets import SecretRef, SecretScheme, SecretUnavailable, env_name_allowed

MAX_SECRET_BYTES = 64 * 1024


class LocalSecrets:
    """Resolves ``env:`` from ``environment`` (the variables config read) when a pattern of ``env_names``
    allows the name (``NAME``, or a prefix ``NAME_*``); ``file:`` below one of ``directories``."""

    def __init__(
        self, *, environment: Mapping[str, str], env_names: Sequence[str], directories: Sequence[Path]
    ) -> None:
        self.environment = environment
        self.env_names = tuple(env_names)
        self.directories = tuple(directories)

    def resolve(self, reference: SecretRef) -> str:
        if reference.scheme is SecretScheme.ENV:
            return self._variable(reference)
        return self._file(reference)

    def _variable(self, reference: SecretRef) -> str:
        if not env_name_allowed(reference.name, self.env_names):
            allowed = ", ".join(self.env_names) or "none"
            raise SecretUnavailable(
                reference, f"is not a variable scenarios may read (CLIFFWATCH_SECRET_ENV: {allowed})"
            )
        value = self.environment.get(reference.name)
        if value is None:
            raise SecretUnavailable(reference, "is not set")
        return value

    def _file(self, reference: SecretRef) -> str:
        real = os.path.realpath(reference.name)  # symlinks followed: Kubernetes mounts secrets through them
        if not any(_inside(real, os.path.realpath(d)) for d in self.directories):
            allowed = ", ".join(map(str, self.directories)) or "none"
            raise SecretUnavailable(
                reference, f"is outside the directories secrets may be read from (CLIFFWATCH_SECRET_DIRS: {allowed})"
            )
        try:
            fd = os.open(real, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOFOLLOW)
        except FileNotFoundError:
            raise SecretUnavailable(reference, "does not exist") from None
        except OSError as exc:
            raise SecretUnavailable(reference, f"cannot be read ({exc.strerror})") from None
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise SecretUnavailable(reference, "is not a regular file")
            if info.st_size > MAX_SECRET_BYTES:
                raise SecretUnavailable(reference, f"is larger than {MAX_SECRET_BYTES // 1024} KiB")
            data = bytearray()
            while len(data) <= MAX_SECRET_BYTES and (chunk := os.read(fd, MAX_SECRET_BYTES + 1 - len(data))):
                data += chunk
        except OSError as exc:
            raise SecretUnavailable(reference, f"cannot be read ({exc.strerror})") from None
        finally:
            os.close(fd)
        if len(data) > MAX_SECRET_BYTES:
            raise SecretUnavailable(reference, f"is larger than {MAX_SECRET_BYTES // 1024} KiB")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise SecretUnavailable(reference, "is not UTF-8 text") from None
        return text.removesuffix("\n").removesuffix("\r") if text.endswith("\n") else text


def _inside(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip("/") + "/")
