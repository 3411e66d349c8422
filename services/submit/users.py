"""Users and tokens: bcrypt-hashed passwords, random bearer tokens stored only as SHA-256 digests.

Neither a password nor a token is ever logged or stored in clear.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import re
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import bcrypt
import structlog
from pydantic import BaseModel, ConfigDict
from pymongo import ASCENDING
from pymongo.errors import DuplicateKeyError

from services.submit.errors import ApiError, shown
from shared.db.retry import idempotent
from shared.db.store import Store
from shared.records import now_ms
from shared.scheduling.vclusters import VirtualCluster

log = structlog.get_logger("paiq.submit.users")

# Not "." nor "..": a URL's path normalization would take them away (any name of dots only is refused).
USER_PATTERN = re.compile(r"(?!\.+$)[A-Za-z0-9_\-.]{1,64}")
DEFAULT_TOKEN_SECONDS = 7 * 24 * 3600
MAX_TOKEN_SECONDS = 365 * 24 * 3600
MIN_PASSWORD_LENGTH = 6
MAX_PASSWORD_BYTES = 72


@dataclass(frozen=True)
class Principal:
    user: str
    admin: bool
    groups: tuple[str, ...] = ()
    application: bool = False  # an application token's: it may not manage users or tokens (OpenPAI v1.8)


def may_use(vc: VirtualCluster, user: str, groups: tuple[str, ...], *, admin: bool) -> bool:
    """Whether a user may submit into ``vc``, and so whether the users answers (v1 and v2) list it as theirs: an
    administrator every VC (as OpenPAI: admins have access to all VCs), another user one that names them or one
    of their groups, or everyone (``*``). A stopped VC stays one they may use; it refuses new jobs for that."""
    return admin or vc.admits(user, groups)


class UserInfo(BaseModel):
    """A user as the API may show it: never the password hash."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    name: str
    admin: bool
    groups: tuple[str, ...] = ()
    email: str = ""  # OpenPAI v1.8's user fields (/api/v2); empty where never given
    extension: dict[str, object] = {}


class TokenInfo(BaseModel):
    """A token as its owner may see it: its id (the digest it is stored by), never the token."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    id: str
    application: bool
    expires_ms: int


# What a user's document may show: the password hash never leaves the store.
_SHOWN = {"admin": 1, "groups": 1, "email": 1, "extension_json": 1}


def _extension(doc: dict[str, object]) -> dict[str, object]:
    """A user's extension: kept as JSON text, so that any key a client sends ('$x', 'a.b') is stored as sent."""
    text = doc.get("extension_json")
    loaded = json.loads(text) if isinstance(text, str) else {}
    return loaded if isinstance(loaded, dict) else {}


def _info(doc: dict[str, object]) -> UserInfo:
    groups = doc.get("groups")
    return UserInfo(name=str(doc["_id"]), admin=bool(doc.get("admin")),
                    groups=tuple(str(g) for g in groups) if isinstance(groups, list) else (),
                    email=str(doc.get("email") or ""),
                    extension=_extension(doc))


def user_name_problem(user: str) -> str | None:
    """What is wrong with ``user`` as a user name, or None."""
    if USER_PATTERN.fullmatch(user):
        return None
    return f"user name {shown(user)} must be 1-64 letters, digits, '_', '-' or '.', not dots only"


def check_user_name(user: str) -> str:
    problem = user_name_problem(user)
    if problem:
        raise ApiError("InvalidParametersError", problem)
    return user


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


DEFAULT_ROUNDS = 12  # bcrypt's own default cost: 2**12 rounds, about a quarter of a CPU-second a password


def _hash_password(password: str, rounds: int) -> bytes:
    return bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds))


def password_problem(password: object, *, at_least: int = MIN_PASSWORD_LENGTH) -> str | None:
    """What is wrong with ``password`` (``at_least``: its shortest length; 1 when logging in), or None."""
    if not isinstance(password, str):
        return "password must be a string"
    if len(password) < at_least:
        return f"password must be at least {at_least} characters"
    try:
        encoded = password.encode()
    except UnicodeEncodeError:
        return "password must be valid Unicode (it holds an unpaired surrogate)"
    if len(encoded) > MAX_PASSWORD_BYTES:
        return f"password must be at most {MAX_PASSWORD_BYTES} bytes of UTF-8 (bcrypt's limit)"
    return None


class Users:
    def __init__(self, store: Store, *, rounds: int = DEFAULT_ROUNDS) -> None:
        """``rounds``: the bcrypt cost new passwords are hashed with (PAIQ_PASSWORD_HASH_ROUNDS); a stored hash
        keeps the cost it was made with."""
        self._users = store.users
        self._tokens = store.tokens
        self._rounds = rounds
        # Checked against when the user does not exist, so both failures take the same time.
        self._dummy_hash = bcrypt.hashpw(b"paiq-no-such-user", bcrypt.gensalt(rounds))

    async def create(self, user: str, password: str, *, admin: bool, groups: tuple[str, ...] = (),
                     email: str = "", extension: dict[str, object] | None = None) -> None:
        problem = password_problem(password)
        if problem:
            raise ApiError("InvalidParametersError", problem)
        hashed = (await asyncio.to_thread(_hash_password, password, self._rounds)).decode()
        doc = {"_id": check_user_name(user), "password_hash": hashed, "admin": admin, "groups": list(groups),
               "created_ms": now_ms()}
        if email:
            doc["email"] = email
        if extension:
            doc["extension_json"] = json.dumps(extension)

        async def insert() -> bool:
            try:
                await self._users.insert_one(doc)
            except DuplicateKeyError:  # someone's, or this request's own try that the restart cut off
                stored = await self._users.find_one({"_id": user}, {"password_hash": 1})
                return stored is not None and stored.get("password_hash") == hashed
            return True

        if not await idempotent(insert, "create a user"):
            raise ApiError("ConflictUserError", f"user {user} already exists")
        log.info("user created", user=user, admin=admin)

    async def update(self, user: str, *, password: str | None, admin: bool | None,
                     groups: tuple[str, ...] | None = None) -> None:
        changes: dict[str, object] = {}
        if password is not None:
            problem = password_problem(password)
            if problem:
                raise ApiError("InvalidParametersError", problem)
            changes["password_hash"] = (await asyncio.to_thread(_hash_password, password, self._rounds)).decode()
        if admin is not None:
            changes["admin"] = admin
        if groups is not None:
            changes["groups"] = list(groups)
        if not await self.exists(user):
            raise ApiError("NoUserError", f"user {user} does not exist")
        if admin is False and not await self._users.count_documents({"admin": True, "_id": {"$ne": user}}, limit=1):
            raise ApiError("RemoveAdminError", f"user {user} is the last admin; make another user an admin first "
                                               "(the platform always keeps one)")
        if changes:
            await idempotent(lambda: self._users.update_one({"_id": user}, {"$set": changes}), "update a user")
        if password is not None:  # a new password ends old sessions (application tokens stay, as in OpenPAI v1.8)
            await idempotent(lambda: self._tokens.delete_many({"user": user, "application": {"$ne": True}}),
                             "end a user's sessions")
        log.info("user updated", user=user, password_changed=password is not None, admin=admin)

    async def set_profile(self, user: str, *, email: str | None = None,
                          extension: dict[str, object] | None = None) -> None:
        """OpenPAI v1.8's profile fields (/api/v2): a new e-mail address, extension keys merged in."""
        changes: dict[str, object] = {} if email is None else {"email": email}
        stored = await self._users.find_one({"_id": user}, {"extension_json": 1})
        if stored is None:
            raise ApiError("NoUserError", f"user {user} does not exist")
        if extension:  # an admin's change: read, merge, write (two admins at once: the last one's keys win)
            changes["extension_json"] = json.dumps({**_extension(stored), **extension})
        if changes:
            await idempotent(lambda: self._users.update_one({"_id": user}, {"$set": changes}), "update a user")

    async def join(self, user: str, group: str, *, leave: bool = False) -> None:
        """Put ``user`` in ``group`` (``leave``: take them out); NoUserError for an unknown user."""
        change = {"$pull": {"groups": group}} if leave else {"$addToSet": {"groups": group}}
        result = await idempotent(lambda: self._users.update_one({"_id": user}, change), "change a user's groups")
        if result.matched_count == 0:
            raise ApiError("NoUserError", f"user {user} does not exist")
        log.info("user's groups changed", user=user, group=group, left=leave)

    async def members(self, group: str) -> list[UserInfo]:
        """The users in ``group``, by name (the ``users_by_group`` index)."""
        return [_info(d) async for d in self._users.find({"groups": group}, _SHOWN).sort([("_id", ASCENDING)])]

    async def leave_everywhere(self, group: str) -> None:
        """Take every user out of ``group`` (it was removed)."""
        await idempotent(lambda: self._users.update_many({"groups": group}, {"$pull": {"groups": group}}),
                         "take users out of a removed group")

    async def tokens_of(self, user: str) -> list[TokenInfo]:
        """The user's live tokens, by id (the ``tokens_by_user`` index; few per user)."""
        now = datetime.now(UTC)
        out = []
        async for d in self._tokens.find({"user": user}).sort([("_id", ASCENDING)]).limit(1000):
            expires = d["expires_at"] if d["expires_at"].tzinfo else d["expires_at"].replace(tzinfo=UTC)
            if expires > now:
                out.append(TokenInfo(id=str(d["_id"]), application=bool(d.get("application")),
                                     expires_ms=int(expires.timestamp() * 1000)))
        return out

    async def revoke(self, user: str, token: str) -> bool:
        """End one of ``user``'s tokens, given as the token or as its id; False when they hold no such token."""
        ids = [_digest(token)] + ([token] if re.fullmatch(r"[0-9a-f]{64}", token) else [])
        result = await idempotent(lambda: self._tokens.delete_many({"_id": {"$in": ids}, "user": user}),
                                  "revoke a token")
        return int(result.deleted_count) > 0

    async def exists(self, user: str) -> bool:
        return await self._users.count_documents({"_id": user}, limit=1) > 0

    async def get(self, user: str) -> UserInfo | None:
        doc = await self._users.find_one({"_id": user}, _SHOWN)
        return _info(doc) if doc is not None else None

    async def list_all(self) -> list[UserInfo]:
        """Every user, by name (the ``_id`` index)."""
        return [_info(d) async for d in self._users.find({}, _SHOWN).sort([("_id", ASCENDING)])]

    async def delete(self, user: str) -> int:
        """Remove a user who is not an admin, and every token of theirs; how many tokens that ended.

        As in OpenPAI, an admin is never removed (``403 RemoveAdminError``), so neither yourself nor
        the last admin: the platform cannot be locked out this way. The filter makes the check and the
        removal one step, so a user made admin meanwhile stays.
        """
        tries = 0

        async def remove() -> bool:
            nonlocal tries
            tries += 1
            return (await self._users.delete_one({"_id": user, "admin": {"$ne": True}})).deleted_count == 1

        if not await idempotent(remove, "delete a user"):
            if await self.exists(user):
                raise ApiError("RemoveAdminError", f"user {user} is an admin, and admins may not be removed "
                                                   "(so the platform always keeps one)")
            if tries == 1:  # gone after a try the restart cut off: that try removed them
                raise ApiError("NoUserError", f"user {user} does not exist")
        # principal() already refuses tokens whose user is gone; this also drops them from the store
        return int((await idempotent(lambda: self._tokens.delete_many({"user": user}), "end a user's sessions"))
                   .deleted_count)

    async def count(self) -> int:
        return await self._users.count_documents({})

    async def check_password(self, user: str, password: str) -> bool:
        """Whether ``password`` is ``user``'s (False for an unknown user, in the same time)."""
        doc = await self._users.find_one({"_id": user}, {"password_hash": 1})
        stored = str(doc["password_hash"]).encode() if doc else self._dummy_hash
        try:
            ok = await asyncio.to_thread(bcrypt.checkpw, password.encode(), stored)
        except ValueError:  # a password bcrypt cannot take is nobody's
            return False
        return doc is not None and ok

    async def login(self, user: str, password: str, expiration_s: int) -> tuple[str, bool]:
        """A new token for ``user``, or UnauthorizedUserError (same answer for unknown user or bad password)."""
        doc = await self._users.find_one({"_id": user})
        stored = str(doc["password_hash"]).encode() if doc else self._dummy_hash
        ok = await asyncio.to_thread(bcrypt.checkpw, password.encode(), stored)
        if doc is None or not ok:
            log.info("login refused", user=user)
            raise ApiError("UnauthorizedUserError", "user name or password is wrong")
        return await self.issue_token(user, bool(doc.get("admin")), expiration_s), bool(doc.get("admin"))

    async def issue_token(self, user: str, admin: bool, expiration_s: int, *, application: bool = False) -> str:
        token = secrets.token_urlsafe(32)
        expires = datetime.now(UTC) + timedelta(seconds=expiration_s)
        doc = {"_id": _digest(token), "user": user, "admin": admin, "expires_at": expires, "created_ms": now_ms(),
               "application": application}

        async def insert() -> None:
            with contextlib.suppress(DuplicateKeyError):  # only this request's own earlier try has this id
                await self._tokens.insert_one(doc)

        await idempotent(insert, "issue a token")
        log.info("token issued", user=user, expires_at=expires.isoformat())
        return token

    async def principal(self, token: str) -> Principal | None:
        doc = await self._tokens.find_one({"_id": _digest(token)})
        if doc is None:
            return None
        expires = doc["expires_at"]
        if expires.tzinfo is None:
            expires = expires.replace(tzinfo=UTC)
        if expires <= datetime.now(UTC):
            return None
        user = await self._users.find_one({"_id": doc["user"]}, {"admin": 1, "groups": 1})
        if user is None:
            return None
        return Principal(user=str(doc["user"]), admin=bool(user.get("admin")),
                         groups=tuple(str(g) for g in user.get("groups") or ()),
                         application=bool(doc.get("application")))

    async def ensure_admin(self, user: str, password: str) -> bool:
        """Create the configured admin if missing; True when created."""
        if await self.exists(user):
            return False
        try:
            await self.create(user, password, admin=True)
        except ApiError as e:
            if e.code != "ConflictUserError":
                raise
            return False
        return True

