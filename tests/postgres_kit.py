"""PostgreSQL servers of the tests' own: a cluster made with ``initdb`` and run with ``pg_ctl`` on a free
127.0.0.1 port, which a test may stop and start again (a database outage). The session's shared server
(the ``postgres`` fixture in tests/conftest.py) is one of them.

A module of its own, imported by name (``from postgres_kit import ...``): ``from conftest import`` would find
whichever conftest was imported last.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import re
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest


@dataclass(frozen=True, kw_only=True)
class PostgresServer:
    """A running PostgreSQL server of the tests' own, on 127.0.0.1; ``url`` is its database ``cliffwatch``.

    Trust authentication, superuser ``postgres``. Tests make databases of their own (``create_database``)
    so that none sees another's rows.
    """

    host: str
    port: int
    user: str
    database: str

    @property
    def url(self) -> str:
        return self.url_for(self.database)

    def url_for(self, database: str) -> str:
        return f"postgresql+asyncpg://{self.user}@{self.host}:{self.port}/{database}"

    async def create_database(self, name: str, *, template: str = "template0") -> str:
        """A new database (a copy of ``template``, empty by default); returns its URL."""
        import asyncpg  # the server's own client, to make databases before any engine exists

        conn = await asyncpg.connect(host=self.host, port=self.port, user=self.user, database=self.database)
        try:
            await conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
        finally:
            await conn.close()
        return self.url_for(name)


PG_BIN_DIRS = ("/usr/lib/postgresql/*/bin", "/usr/local/pgsql/bin")


@dataclass(frozen=True, kw_only=True)
class PostgresCluster:
    """A PostgreSQL cluster of the tests' own on 127.0.0.1:``port``, which a test may stop and start again
    (a database outage); ``server`` is its superuser's view (database ``postgres``)."""

    home: Path
    port: int
    pg_ctl: str
    prefix: tuple[str, ...]

    @property
    def server(self) -> PostgresServer:
        return PostgresServer(host="127.0.0.1", port=self.port, user="postgres", database="postgres")

    def start(self) -> None:
        options = f"-p {self.port} -k {self.home} -c listen_addresses=127.0.0.1 -c fsync=off -c full_page_writes=off"
        _pg_command([*self.prefix, self.pg_ctl, "-D", str(self.home / "data"), "-l", str(self.home / "server.log"),
                     "-o", options, "-w", "-t", "30", "start"])  # fmt: skip

    def stop(self) -> None:
        """Stops it at once, as a crash would (connections cut, nothing flushed)."""
        _pg_command([*self.prefix, self.pg_ctl, "-D", str(self.home / "data"), "-m", "immediate", "-w", "stop"])


@contextlib.contextmanager
def postgres_cluster() -> Iterator[PostgresCluster]:
    """A new cluster (``initdb`` + ``pg_ctl``) on a free port, started, and removed at the end of the block.

    Fails rather than skips when the server binaries are missing, so a machine without PostgreSQL cannot
    pass the suite without testing the production store. As root (initdb refuses to run as root) the
    server runs as the ``postgres`` user, or ``nobody`` where there is none. fsync is off: a crash of a
    test server loses nothing anyone wants.
    """
    initdb, pg_ctl = _pg_binary("initdb"), _pg_binary("pg_ctl")
    if initdb is None or pg_ctl is None:
        pytest.fail("PostgreSQL server binaries (initdb, pg_ctl) not found: apt-get install postgresql")
    as_user = _pg_run_as()
    home = Path(tempfile.mkdtemp(prefix="cliffwatch-pg-"))
    if as_user is not None:
        shutil.chown(home, user=as_user)
    prefix = ("runuser", "-u", as_user, "--") if as_user is not None else ()
    cluster = PostgresCluster(home=home, port=_free_port(), pg_ctl=pg_ctl, prefix=prefix)
    try:
        _pg_command([*prefix, initdb, "-D", str(home / "data"), "-A", "trust", "-E", "UTF8", "--no-locale",
                     "-U", "postgres", "--no-sync"])  # fmt: skip
        cluster.start()
        try:
            yield cluster
        finally:
            with contextlib.suppress(BaseException):  # already stopped by the test: nothing to do
                cluster.stop()
    finally:
        shutil.rmtree(home, ignore_errors=True)


def _pg_binary(name: str) -> str | None:
    found = shutil.which(name)
    if found is not None:
        return found
    candidates = [Path(p) for d in PG_BIN_DIRS for p in glob.glob(f"{d}/{name}")]
    # the newest version's: /usr/lib/postgresql/15 before /usr/lib/postgresql/9.6, as numbers
    newest = max(candidates, key=lambda p: [int(n) for n in re.findall(r"\d+", str(p))], default=None)
    return None if newest is None else str(newest)


def _pg_run_as() -> str | None:
    """The user to run the server as: None when not root (it runs as us), else postgres or nobody."""
    if os.geteuid() != 0:
        return None
    for user in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            pwd.getpwnam(user)
            return user
    pytest.fail("running as root, and neither a postgres nor a nobody user exists to run PostgreSQL as")


def _pg_command(args: list[str]) -> None:
    done = subprocess.run(args, capture_output=True, text=True, timeout=60, cwd="/", check=False)
    if done.returncode != 0:
        pytest.fail(f"{' '.join(args)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
