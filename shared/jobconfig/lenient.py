"""What OpenPAI's Joi schema let through beyond the plain types, declared once as annotations that the
models (:mod:`shared.jobconfig.model`), the validator and the published JSON Schema all read.

- Integers as Joi read them (:data:`JOI_INTEGER`): OpenPAI v0.14's rest-server declared its integers
  ``Joi.number().integer()`` with Joi's default conversion, so ``"2"``, ``" 2 "``, ``"2.0"``, ``"1e3"`` and
  ``2.0`` are the integers they spell; ``"1.5"``, ``"abc"``, ``""`` and booleans are not.
- Null as the default (:class:`NullMeansDefault`, :func:`defaults_for_nulls`): an optional field written
  ``null`` takes its default, as Joi's ``.allow(null)`` with a default did; a field whose type admits
  None (``minFailedTaskCount``: "never a trigger") keeps it. :class:`EmptyMeansDefault` marks a field
  where ``""`` means the default too (``virtualCluster``).
- Obsolete fields (:data:`OBSOLETE_FIELDS`): validated as an integer, then ignored with a warning.
- Internal fields (:class:`Internal`): what another protocol (v2) needs the job to hold and v1 cannot say
  (an image per role, registry credentials, secrets). Not part of the v1 protocol: a v1 body's key of
  that name is an unknown field (warned about, ignored) and the published JSON Schema leaves them out
  (:func:`protocol_fields`).
"""

from __future__ import annotations

import functools
import re
import types
from dataclasses import dataclass
from decimal import Decimal
from typing import Annotated, Any, ClassVar, Union, get_args, get_origin

from pydantic import BaseModel, BeforeValidator
from pydantic.fields import FieldInfo

# What JavaScript's Number() reads as a decimal number (after trimming whitespace): no hex, no Infinity.
_DECIMAL = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
MAX_SAFE_INTEGER = 2**53 - 1  # Joi's integer() is Number.isSafeInteger


def joi_integer(value: object) -> object:
    """The integer ``value`` stands for as OpenPAI's Joi read it (``number().integer()``, converting):
    a JSON integer, an integral JSON number (``2.0``) or a string of a decimal number that is integral
    (``"2"``, ``" 2 "``, ``"2.0"``, ``"1e3"``), within JavaScript's safe integers. Anything else comes
    back unchanged, for the model to refuse with its path."""
    if isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        if value.is_integer() and abs(value) <= MAX_SAFE_INTEGER:  # is_integer() is False for NaN and inf
            return int(value)
        return value
    if isinstance(value, str) and _DECIMAL.fullmatch(value.strip()):
        number = Decimal(value.strip())
        if number.copy_abs() <= MAX_SAFE_INTEGER and number == number.to_integral_value():
            return int(number)
    return value


def count_of(value: object, default: int, least: int, most: int) -> int:
    """A count the config asks for (``taskNumber``, ``gpuNumber``, ``portNumber``) read from the raw JSON
    before validation: ``default`` when absent or not an integer (validation refuses that later), else
    the integer held within ``least``..``most``."""
    number = joi_integer(default if value is None else value)
    if isinstance(number, bool) or not isinstance(number, int):
        return default
    return min(max(number, least), most)


# An integer of the protocol, last in its field's ``Annotated[int, Field(strict=True, ge=.., le=..), ...]``
# (after its bounds, so that the JSON Schema keeps them): what Joi's ``number().integer()`` took
# (:func:`joi_integer`), nothing else.
JOI_INTEGER = BeforeValidator(joi_integer)


@dataclass(frozen=True)
class EmptyMeansDefault:
    """A field's marker (in ``Annotated``): ``""`` as well as ``null`` means its default."""


@dataclass(frozen=True)
class Internal:
    """A field's marker (in ``Annotated``): paiq's own, set by another protocol's mapping, never read
    from a v1 body nor listed in the v1 schema."""


def is_internal(field: FieldInfo) -> bool:
    return any(isinstance(m, Internal) for m in field.metadata)


def protocol_fields(model: type[BaseModel]) -> dict[str, FieldInfo]:
    """The model's fields that the v1 protocol has (its internal ones left out), by attribute name."""
    return {name: field for name, field in model.model_fields.items() if not is_internal(field)}


# In OpenPAI's schema, obsolete: validated as an integer, then only warned about (rest-server
# middlewares/job.js). Field -> what to use instead.
OBSOLETE_FIELDS = {"killAllOnCompletedTaskNumber": "use minFailedTaskCount and minSucceededTaskCount instead"}


class NullMeansDefault:
    """A model mixin: an optional field written ``null`` takes its default (``NULL_MEANS_DEFAULT``; a
    field whose type admits None keeps it), as do ``""`` in a field marked :class:`EmptyMeansDefault`."""

    NULL_MEANS_DEFAULT: ClassVar[bool] = True


def defaults_for_nulls(model: type[BaseModel], values: dict[str, Any]) -> dict[str, Any]:
    """``values`` (keyed by alias) without the nulls and empty strings that mean the field's default."""
    dropped = default_keys(model)
    if not dropped:
        return values
    return {k: v for k, v in values.items() if not (k in dropped and (v is None or (v == "" and dropped[k])))}


@functools.cache
def default_keys(model: type[BaseModel]) -> dict[str, bool]:
    """The fields (by alias) where null means the default, each with whether ``""`` does too (read once per
    model: every model instance validated asks)."""
    if not getattr(model, "NULL_MEANS_DEFAULT", False):
        return {}
    out = {}
    for name, field in protocol_fields(model).items():
        if field.is_required() or admits_none(field.annotation):
            continue
        out[field.alias or name] = any(isinstance(m, EmptyMeansDefault) for m in field.metadata)
    return out


def admits_none(annotation: Any) -> bool:
    """Whether a field's type has None among its values (``X | None``)."""
    if get_origin(annotation) is Annotated:
        return admits_none(get_args(annotation)[0])
    if get_origin(annotation) in (Union, types.UnionType):
        return any(a is type(None) or admits_none(a) for a in get_args(annotation))
    return annotation is type(None)
