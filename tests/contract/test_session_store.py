"""Dashboard sessions under contract, on the in-memory twin, SQLite and PostgreSQL: found only by the hash
of their id, only before they expire and only while their token is not revoked; logout removes them."""

from __future__ import annotations

import hashlib
from datetime import timedelta

from store_kit import Backend

from cliffwatch.adapters.store.sessions_sql import SqlSessionStore
from cliffwatch.domain.ports import SessionStore
from cliffwatch.domain.service.runs import TokenRole
from cliffwatch.services.sessions import InMemorySessionStore, SessionService, csrf_matches, csrf_token
from cliffwatch.services.tokens import TokenService

TTL_S = 600


def sessions_of(backend: Backend) -> SessionStore:
    if backend.memory is not None:
        return InMemorySessionStore(backend.memory)
    return SqlSessionStore(backend.engine(), now=backend.clock)


async def service(backend: Backend) -> tuple[SessionService, TokenService, str]:
    tokens = TokenService(backend.store, now=backend.clock)
    _, token = await tokens.create("dash", TokenRole.OPERATOR)
    return SessionService(sessions_of(backend), tokens, ttl_s=TTL_S, now=backend.clock), tokens, token


async def test_a_login_makes_a_session_found_by_its_id_with_the_tokens_role(backend: Backend) -> None:
    sessions, _, token = await service(backend)
    logged_in = await sessions.login(token)
    assert logged_in is not None
    found = await sessions.resolve(logged_in.session_id)
    assert found is not None
    session, record = found
    assert record.name == "dash"
    assert record.role is TokenRole.OPERATOR
    assert session.expires_at == backend.clock() + timedelta(seconds=TTL_S)


async def test_the_store_keeps_only_the_hash_of_the_session_id(backend: Backend) -> None:
    sessions, _, token = await service(backend)
    logged_in = await sessions.login(token)
    assert logged_in is not None
    assert logged_in.session.id_hash == hashlib.sha256(logged_in.session_id.encode()).hexdigest()
    assert logged_in.session_id not in repr(logged_in.session)
    store = sessions.store
    # the hash is not a key to the session: only the id it was made from is
    assert await sessions.resolve(logged_in.session.id_hash) is None
    assert await store.session_by_hash(logged_in.session.id_hash, now=backend.clock()) is not None


async def test_unknown_tokens_and_ids_get_nothing(backend: Backend) -> None:
    sessions, _, _ = await service(backend)
    assert await sessions.login("cw_not-a-token") is None
    assert await sessions.login("") is None
    assert await sessions.resolve("no-such-session") is None
    assert await sessions.resolve("") is None


async def test_a_session_ends_when_it_expires(backend: Backend) -> None:
    sessions, _, token = await service(backend)
    logged_in = await sessions.login(token)
    assert logged_in is not None
    backend.clock.advance(TTL_S - 1)
    assert await sessions.resolve(logged_in.session_id) is not None
    backend.clock.advance(1)
    assert await sessions.resolve(logged_in.session_id) is None


async def test_logout_deletes_the_session(backend: Backend) -> None:
    sessions, _, token = await service(backend)
    logged_in = await sessions.login(token)
    assert logged_in is not None
    assert await sessions.logout(logged_in.session_id)
    assert await sessions.resolve(logged_in.session_id) is None
    assert not await sessions.logout(logged_in.session_id)


async def test_revoking_the_token_ends_its_sessions_and_the_clean_up_removes_them(backend: Backend) -> None:
    sessions, tokens, token = await service(backend)
    first, second = await sessions.login(token), await sessions.login(token)
    assert first is not None
    assert second is not None
    assert first.session_id != second.session_id  # a new id at every login
    assert await tokens.revoke(first.token.id)
    assert await sessions.resolve(first.session_id) is None
    assert await sessions.resolve(second.session_id) is None
    assert await sessions.store.delete_expired_sessions(backend.clock()) == 2


async def test_the_clean_up_removes_expired_sessions_only(backend: Backend) -> None:
    sessions, _, token = await service(backend)
    old = await sessions.login(token)
    backend.clock.advance(TTL_S // 2)
    young = await sessions.login(token)
    assert old is not None
    assert young is not None
    backend.clock.advance(TTL_S // 2)
    assert await sessions.store.delete_expired_sessions(backend.clock()) == 1
    assert await sessions.resolve(young.session_id) is not None


def test_the_csrf_token_is_the_sessions_own() -> None:
    assert csrf_token("a") == csrf_token("a")
    assert csrf_token("a") != csrf_token("b")
    assert csrf_matches("a", csrf_token("a"))
    assert not csrf_matches("a", csrf_token("b"))
    assert not csrf_matches("a", None)
    assert not csrf_matches("a", "")
