"""Integers as OpenPAI's Joi schema read them: a JSON integer, an integral number or a string of one.

OpenPAI v0.14's rest-server declared its integers ``Joi.number().integer()`` with Joi's default
conversion, so ``"2"``, ``" 2 "``, ``"2.0"``, ``"1e3"`` and ``2.0`` are the integers they spell; ``"1.5"``,
``"abc"``, ``""`` and booleans are not.
"""

from __future__ import annotations

import re
from decimal import Decimal

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
