"""What the API reads from request bodies (other than a job config, :mod:`shared.jobconfig.model`, and a virtual
cluster, :mod:`shared.scheduling.vclusters`), as models: the routes validate their bodies by them
(:class:`services.submit.contract.route.ModelBody`), and the OpenAPI document's request schemas are generated from them
(:mod:`services.submit.openapi`).

Each field refuses in OpenPAI's words: its validator runs before pydantic's own checks and raises
:func:`services.submit.contract.refusals.refusal` with them (``username: is required and must be a non-empty string``,
``user name '...' must be ...``); pydantic's constraints, kept for the document, never refuse what the
validator let through.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
    TypeAdapter,
    ValidationInfo,
    WithJsonSchema,
    model_validator,
)

from services.submit.contract.configschema import integer_pattern
from services.submit.contract.refusals import refusal
from services.submit.users import (
    DEFAULT_TOKEN_SECONDS,
    MAX_PASSWORD_BYTES,
    MAX_TOKEN_SECONDS,
    MIN_PASSWORD_LENGTH,
    USER_PATTERN,
    password_problem,
    user_name_problem,
)
from shared.jobconfig.problems import shown

REQUIRED_TEXT = "is required and must be a non-empty string"


def _text(value: object, info: ValidationInfo) -> str:
    if not isinstance(value, str) or not value:
        raise refusal(f"{info.field_name}: {REQUIRED_TEXT}")
    return value


def _user_name(value: object, info: ValidationInfo) -> str:
    name = _text(value, info)
    problem = user_name_problem(name)
    if problem:
        raise refusal(problem)
    return name


def _password(at_least: int, *, optional: bool = False) -> BeforeValidator:
    """A password's refusals in OpenPAI's words (``optional``: null stands for no password)."""
    def check(value: object, info: ValidationInfo) -> str | None:
        if value is None and optional:
            return None
        problem = password_problem(_text(value, info), at_least=at_least)
        if problem:
            raise refusal(problem)
        return str(value)
    return BeforeValidator(check)


def _seconds(raw: object) -> int:
    """A token's lifetime in seconds: an integral number, or a numeric string as forms send it."""
    words = refusal(f"expiration: must be a whole number of seconds, 1-{MAX_TOKEN_SECONDS}")
    if isinstance(raw, bool) or not isinstance(raw, int | float | str):
        raise words
    if isinstance(raw, str) and not (raw.isascii() and raw.isdigit()):  # int() takes any script's digits, ' 3'
        raise words
    try:
        seconds = int(raw)
    except (ValueError, OverflowError) as e:  # "1.5", "abc", a string of thousands of digits, inf, nan
        raise words from e
    if (isinstance(raw, float) and seconds != raw) or not 1 <= seconds <= MAX_TOKEN_SECONDS:
        raise words
    return seconds


def _flag(value: object, info: ValidationInfo) -> bool | None:
    if value is not None and not isinstance(value, bool):
        raise refusal(f"{info.field_name}: must be true or false")
    return value


def _groups(value: object) -> list[str] | None:
    if value is not None and not (isinstance(value, list) and all(isinstance(g, str) and g for g in value)):
        raise refusal("groups: must be a list of non-empty strings")
    return value


def _stop(value: object) -> str:
    if value != "STOP":
        raise refusal(f'value: must be "STOP", got {shown(value)[1:-1]}')
    return value


UserName = Annotated[str, StringConstraints(pattern=f"^{USER_PATTERN.pattern}$"), BeforeValidator(_user_name)]
# python-re: USER_PATTERN looks ahead, which pydantic's default (Rust) engine does not do
_PATTERNS = ConfigDict(regex_engine="python-re")
USER_NAME_SCHEMA = TypeAdapter(UserName, config=_PATTERNS).json_schema()  # of a path's user name
_PASSWORD_WORDS = f"{MIN_PASSWORD_LENGTH} characters to {MAX_PASSWORD_BYTES} bytes of UTF-8 (bcrypt's limit)"
TokenSeconds = Annotated[int, Field(ge=1, le=MAX_TOKEN_SECONDS), BeforeValidator(_seconds), WithJsonSchema({
    "anyOf": [{"type": "integer", "minimum": 1, "maximum": MAX_TOKEN_SECONDS},
              {"type": "string", "pattern": integer_pattern(1, MAX_TOKEN_SECONDS)}],
    "description": "seconds (default 7 days)"})]


class Request(BaseModel):
    model_config = ConfigDict(frozen=True, **_PATTERNS)
    # How pydantic's own refusals of these bodies are worded (services.submit.contract.refusals): a required field
    # is a non-empty string in each of them.
    WORDS: ClassVar[Mapping[str, str]] = {"missing": REQUIRED_TEXT}


class TokenRequest(Request):
    """``POST /api/v1/token`` (a JSON object or a form): log in."""

    username: UserName
    # No stored password breaks these rules, so a refusal says nothing about the user; bcrypt would refuse it.
    password: Annotated[str, _password(at_least=1)] = Field(min_length=1, max_length=MAX_PASSWORD_BYTES,
                                                            description=f"at most {MAX_PASSWORD_BYTES} bytes of "
                                                                        "UTF-8")
    expiration: TokenSeconds = DEFAULT_TOKEN_SECONDS


class UserChange(Request):
    """``PUT /api/v1/user``: modify false (or absent): create the user, password required; modify true: change
    what is given."""

    username: UserName
    admin: Annotated[bool | None, BeforeValidator(_flag)] = None
    groups: Annotated[list[Annotated[str, StringConstraints(min_length=1)]] | None, BeforeValidator(_groups)] = None
    modify: Annotated[bool, BeforeValidator(lambda v: v is True)] = False  # true only when it is true
    password: Annotated[str | None, _password(at_least=MIN_PASSWORD_LENGTH, optional=True)] = Field(
        default=None, min_length=MIN_PASSWORD_LENGTH, max_length=MAX_PASSWORD_BYTES, description=_PASSWORD_WORDS)

    @model_validator(mode="after")
    def _password_to_create(self) -> UserChange:
        if self.password is None and not self.modify:
            raise refusal(f"password: {REQUIRED_TEXT}")
        return self


class UserRemoval(Request):
    """``DELETE /api/v1/user``: remove a user who is not an admin."""

    username: UserName


class ExecutionTypeChange(Request):
    """``PUT .../executionType``: stop a job."""

    value: Annotated[Literal["STOP"], BeforeValidator(_stop)]

    @model_validator(mode="before")
    @classmethod
    def _any_json(cls, data: Any) -> dict[str, object]:
        """Any JSON: what is not an object, or lacks ``value``, is refused as a value that is not "STOP"."""
        return {"value": data.get("value") if isinstance(data, dict) else None}


REQUESTS: tuple[type[BaseModel], ...] = (TokenRequest, UserChange, UserRemoval, ExecutionTypeChange)
