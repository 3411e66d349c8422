"""What the API reads from request bodies (other than a job config, :mod:`shared.jobconfig.model`, and a virtual
cluster, :mod:`shared.scheduling.vclusters`), as models: the OpenAPI document's request schemas are generated from
them (:mod:`services.submit.openapi`).

Each route checks its body first, field by field, with OpenPAI's words for each refusal
(:mod:`services.submit.access`, :mod:`services.submit.jobs`), then holds what it read as one of these
values. Every constraint here is one those checks already made, so building the model never refuses what
they accepted; the model is the contract the document publishes and the typed value the route goes on with.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, TypeAdapter, WithJsonSchema

from services.submit.configschema import integer_pattern
from services.submit.users import (
    DEFAULT_TOKEN_SECONDS,
    MAX_PASSWORD_BYTES,
    MAX_TOKEN_SECONDS,
    MIN_PASSWORD_LENGTH,
    USER_PATTERN,
)

UserName = Annotated[str, StringConstraints(pattern=f"^{USER_PATTERN.pattern}$")]
# python-re: USER_PATTERN looks ahead, which pydantic's default (Rust) engine does not do
_PATTERNS = ConfigDict(regex_engine="python-re")
USER_NAME_SCHEMA = TypeAdapter(UserName, config=_PATTERNS).json_schema()  # of a path's user name
_PASSWORD_WORDS = f"{MIN_PASSWORD_LENGTH} characters to {MAX_PASSWORD_BYTES} bytes of UTF-8 (bcrypt's limit)"
TokenSeconds = Annotated[int, Field(ge=1, le=MAX_TOKEN_SECONDS), WithJsonSchema({
    "anyOf": [{"type": "integer", "minimum": 1, "maximum": MAX_TOKEN_SECONDS},
              {"type": "string", "pattern": integer_pattern(1, MAX_TOKEN_SECONDS)}],
    "description": "seconds (default 7 days)"})]


class Request(BaseModel):
    model_config = ConfigDict(frozen=True, **_PATTERNS)


class TokenRequest(Request):
    """``POST /api/v1/token`` (a JSON object or a form): log in."""

    username: UserName
    password: str = Field(min_length=1, max_length=MAX_PASSWORD_BYTES,
                          description=f"at most {MAX_PASSWORD_BYTES} bytes of UTF-8")
    expiration: TokenSeconds = DEFAULT_TOKEN_SECONDS


class UserChange(Request):
    """``PUT /api/v1/user``: modify false (or absent): create the user, password required; modify true: change
    what is given."""

    username: UserName
    password: str | None = Field(default=None, min_length=MIN_PASSWORD_LENGTH, max_length=MAX_PASSWORD_BYTES,
                                 description=_PASSWORD_WORDS)
    admin: bool | None = None
    groups: list[Annotated[str, StringConstraints(min_length=1)]] | None = None
    modify: bool = False


class UserRemoval(Request):
    """``DELETE /api/v1/user``: remove a user who is not an admin."""

    username: UserName


class ExecutionTypeChange(Request):
    """``PUT .../executionType``: stop a job."""

    value: Literal["STOP"]


REQUESTS: tuple[type[BaseModel], ...] = (TokenRequest, UserChange, UserRemoval, ExecutionTypeChange)
