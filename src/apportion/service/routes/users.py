"""User and token routes: who am I, users (admins), tokens."""

# No "from __future__ import annotations": FastAPI reads the handlers' annotations at
# runtime, and they name dependencies made from the Api context.
from datetime import UTC
from typing import Annotated

from fastapi import APIRouter, Depends, Query

from apportion.core.units import format_duration_exact
from apportion.times import format_time

from ..auth import Principal, hash_token, new_token
from ..bodies import NoBody, TokenBody, UserBody, UserChangeBody
from ..replies import Me, NewToken, Token
from ..replies import User as UserReply
from ..store import NotFound, UserRow
from ..validation import MAX_DURATION_S, duration_seconds
from .context import V1, Api, fail


def token_expiry(body: TokenBody, now: float, most: float | None) -> float | None:
    """When a token asked for with ``body`` at ``now`` (the server's clock) expires: its
    ``expires_in`` from now, or its ``expires_at``; neither: ``most`` from now
    (``[auth] max_token_lifetime``), or never (None) without that limit. 422 naming the
    field for both given, a lifetime <= 0, a time not after ``now``, or a lifetime over
    ``most``."""
    if body.expires_in is not None and body.expires_at is not None:
        raise fail(422, "expires_in, expires_at: give one of them, not both")
    limit = "" if most is None else \
        f"the server's limit ([auth] max_token_lifetime: {format_duration_exact(most)})"
    if body.expires_in is not None:
        lifetime = duration_seconds(body.expires_in)
        sent = repr(body.expires_in) if isinstance(body.expires_in, str) \
            else f"{body.expires_in:g} s"
        if lifetime <= 0:
            raise fail(422, f"expires_in: must be a lifetime > 0, got {sent}")
        if most is not None and lifetime > most:
            raise fail(422, f"expires_in: {sent} is over {limit}")
        return now + lifetime
    if body.expires_at is not None:
        if body.expires_at - now > MAX_DURATION_S:  # also a time no calendar can write
            raise fail(422, f"expires_at: {body.expires_at!r} s since the epoch is more than "
                            f"{format_duration_exact(MAX_DURATION_S)} after the server's time "
                            f"{format_time(now, UTC)} (the cap on any duration)")
        at = format_time(body.expires_at, UTC)
        if body.expires_at <= now:
            raise fail(422, f"expires_at: {at} is not in the future (the server's time is "
                            f"{format_time(now, UTC)})")
        if most is not None and body.expires_at - now > most:
            raise fail(422, f"expires_at: {at} is past {limit}, which ends at "
                            f"{format_time(now + most, UTC)}")
        return body.expires_at
    return None if most is None else now + most


def router(api: Api) -> APIRouter:
    """``/v1/me``, ``/v1/users`` and below, ``/v1/tokens`` and below."""
    router = APIRouter()
    store = api.store
    rights, forbid = api.rights, api.forbid
    Reader = Annotated[Principal, Depends(api.principal)]
    User = Annotated[UserRow, Depends(api.writer)]
    v1 = V1
    token_cache = api.token_cache

    @router.get(f"{v1}/me", tags=["users"])
    def me(who: Reader) -> Me:
        """The user the token belongs to."""
        return Me(name=who.user.name, admin=who.user.admin)

    def _user(u: UserRow) -> UserReply:
        """``u`` with what would refuse its work now: the check a submission makes, told
        when the admin adds or changes the user rather than at the user's first submit."""
        if api.settings.executor.kind == "memory":  # runs nothing: no account is needed
            return UserReply.of(u)
        return UserReply.of(u, api.settings.identity.problem(u.name, u.account))

    def _admin(user: UserRow, what: str) -> None:
        if not rights(user).can_manage_users():
            raise forbid(user, f"{what} (admins only)")

    @router.post(f"{v1}/users", status_code=201, tags=["users"])
    def create_user(body: UserBody, user: User) -> UserReply:
        """Create a user (admins only)."""
        _admin(user, "create users")
        u = store.add_user(body.name, actor=user.name, admin=body.admin,
                           unix_user=body.unix_user)
        return _user(u)

    @router.get(f"{v1}/users", tags=["users"])
    def list_users(who: Reader) -> list[UserReply]:
        """Every user with its admin flag and Unix account (admins only)."""
        if who.read_only or not who.user.admin:
            raise forbid(who, "list users (admins only)")
        return [_user(u) for u in store.users()]

    @router.patch(f"{v1}/users/{{name}}", tags=["users"])
    def change_user(name: str, body: UserChangeBody, user: User) -> UserReply:
        """Change a user's admin flag or Unix account (admins only). Takes effect at once
        for every token of that user."""
        _admin(user, "change users")
        u = store.set_user(name, actor=user.name, admin=body.admin,
                           unix_user=body.unix_user or None,
                           clear_unix_user=body.unix_user == "", now=api.now())
        token_cache.clear()
        return _user(u)

    @router.post(f"{v1}/users/{{name}}/tokens", status_code=201, tags=["tokens"])
    def create_token(name: str, user: User, body: TokenBody | None = None) -> NewToken:
        """A new token for a user (admins only). Shown once; only its hash is kept."""
        _admin(user, "create tokens")
        body = body or TokenBody()
        now = api.now()
        expires_at = token_expiry(body, now, api.settings.auth.max_token_lifetime)
        token = new_token()
        # one clock read for both: a lifetime counted from one read and the creation
        # stamped from another put expires_at before created_at (expires_in: 1e-9)
        row = store.add_token(name, hash_token(token), kind=body.kind, label=body.label,
                              expires_at=expires_at, created_at=now)
        store.append_audit(user.name, "token.create", name, None,
                           {"token": row.id, "kind": row.kind, "label": row.label,
                            "expires_at": row.expires_at})
        return NewToken(**Token.of(row, now).model_dump(), token=token)

    @router.get(f"{v1}/tokens", tags=["tokens"])
    def list_tokens(
        who: Reader,
        user: Annotated[str | None, Query(description="only this user's")] = None,
    ) -> list[Token]:
        """Tokens (never the secret): admins see all, others their own."""
        if who.read_only or not who.user.admin:
            if user is not None and user != who.name:
                raise forbid(who, f"list the tokens of {user}")
            user = who.name
        elif user:  # a user who does not exist is a typo, not one without tokens
            try:
                store.get_user(user)
            except NotFound as e:
                raise fail(422, f"user: {e}") from None
        now = api.now()
        return [Token.of(t, now) for t in store.tokens(user or None)]  # "": as if not given

    @router.post(f"{v1}/tokens/{{token_id}}/revoke", tags=["tokens"])
    def revoke_token(token_id: str, user: User, _body: NoBody | None = None) -> Token:
        """Revoke a token (admins, or the token's own user): refused from this moment."""
        mine = {t.id for t in store.tokens(user.name)}
        if not user.admin and token_id not in mine:
            # the same answer whether another user's token has that id or none has: a
            # non-admin must not learn which ids exist (a 404 for the ones that do not did)
            raise forbid(user, f"revoke token {token_id}: it is not one of theirs (their "
                               "own are in apportion tokens list)")
        now = api.now()
        row = store.revoke_token(token_id, actor=user.name, at=now)
        token_cache.clear()
        return Token.of(row, now)

    return router
