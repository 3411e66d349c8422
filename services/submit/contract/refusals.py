"""Pydantic's refusals of a request body, said in OpenPAI's words: the one place they are mapped.

A body is validated by its model (:mod:`services.submit.contract.requests`, or a virtual cluster); each problem
becomes ``field: rule`` without pydantic's wording, the input or a link, and all of them one 400
``InvalidParametersError``. A field whose refusal OpenPAI worded itself (a user name, a password, a
token's expiration) raises :func:`refusal` with those words from its validator; they are passed on as
they are. Everything else is worded by :data:`RULES`, which a body may amend (``words``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from pydantic_core import PydanticCustomError

from services.submit.errors import ApiError, shown

M = TypeVar("M", bound=BaseModel)

# The error type of a refusal in the API's own words (raised by a field's validator).
_OWN = "paiq_refusal"
# A body that is not an object at all, whatever its model.
NOT_AN_OBJECT = "the body must be a JSON object or a form"

# pydantic's error types, said in this API's words (its own messages are not passed on). A key
# "<type> inside" words an error of a field inside the body's fields (a quota's ``cpus``).
RULES: Mapping[str, str] = {
    "missing": "is required",
    "extra_forbidden": "is not a field of this body",
    "float_type": "must be a number", "float_parsing": "must be a number", "finite_number": "must be a number",
    "greater_than_equal": "must be at least {ge}", "less_than_equal": "must be at most {le}",
    "string_type": "must be a string", "tuple_type": "must be a list", "list_type": "must be a list",
    "model_type": "must be an object", "dict_type": "must be an object",
}


def refusal(message: str) -> PydanticCustomError:
    """A field's refusal in the API's own words, whole (the field's name included where OpenPAI said it)."""
    return PydanticCustomError(_OWN, "{message}", {"message": message})


def _field(part: str | int) -> str:
    return str(part) if isinstance(part, int) or (len(part) <= 64 and part.isprintable()) else shown(part)


def _rule(kind: str, inside: bool, ctx: Mapping[str, Any], rules: Mapping[str, str]) -> str:
    rule = rules.get(f"{kind} inside") if inside else None
    if rule is None:
        rule = rules.get(kind, "is not valid")
    values = {k: f"{v:g}" if isinstance(v, float) else v for k, v in ctx.items()}  # 100, not 100.0
    return rule.format(**values)


def problems(error: ValidationError, words: Mapping[str, str] | None = None) -> str:
    """Each problem of ``error``, in order, as OpenPAI's clients read them."""
    rules = {**RULES, **(words or {})}
    said = []
    for e in error.errors(include_url=False, include_input=False):
        loc = e["loc"]
        ctx = e.get("ctx", {})
        if e["type"] == _OWN:
            said.append(str(ctx["message"]))
        elif not loc and e["type"] in {"model_type", "model_attributes_type", "dict_type"}:
            said.append(NOT_AN_OBJECT)
        else:
            where = ".".join(_field(p) for p in loc) or "(body)"
            said.append(f"{where}: {_rule(e['type'], len(loc) > 1, ctx, rules)}")
    return "; ".join(said)


def validated(model: type[M], data: object, *, words: Mapping[str, str] | None = None, prefix: str = "") -> M:
    """``data`` as ``model``, or 400 InvalidParametersError naming each problem (after ``prefix``)."""
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise ApiError("InvalidParametersError", prefix + problems(e, words)) from e
