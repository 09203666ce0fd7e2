"""User and token routes: who am I, users (admins), tokens."""

# No "from __future__ import annotations": FastAPI reads the handlers' annotations at
# runtime, and they name dependencies made from the Api context.
from typing import Annotated

from fastapi import APIRouter, Depends, Query

from ..auth import Principal, hash_token, new_token
from ..bodies import TokenBody, UserBody, UserChangeBody
from ..replies import Me, NewToken, Token
from ..replies import User as UserReply
from ..store import NotFound, UserRow
from .context import V1, Api, fail


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
                           clear_unix_user=body.unix_user == "")
        token_cache.clear()
        return _user(u)

    @router.post(f"{v1}/users/{{name}}/tokens", status_code=201, tags=["tokens"])
    def create_token(name: str, user: User, body: TokenBody | None = None) -> NewToken:
        """A new token for a user (admins only). Shown once; only its hash is kept."""
        _admin(user, "create tokens")
        body = body or TokenBody()
        token = new_token()
        row = store.add_token(name, hash_token(token), kind=body.kind, label=body.label)
        store.append_audit(user.name, "token.create", name, None,
                           {"token": row.id, "kind": row.kind, "label": row.label})
        return NewToken(**Token.of(row).model_dump(), token=token)

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
        return [Token.of(t) for t in store.tokens(user or None)]  # "": as if not given

    @router.post(f"{v1}/tokens/{{token_id}}/revoke", tags=["tokens"])
    def revoke_token(token_id: str, user: User) -> Token:
        """Revoke a token (admins, or the token's own user): refused from this moment."""
        mine = {t.id for t in store.tokens(user.name)}
        if not user.admin and token_id not in mine:
            if any(t.id == token_id for t in store.tokens()):
                raise forbid(user, f"revoke token {token_id} (not theirs)")
            raise NotFound(f"token {token_id}: not found")
        row = store.revoke_token(token_id, actor=user.name)
        token_cache.clear()
        return Token.of(row)

    return router
