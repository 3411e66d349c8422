"""Values as OpenPAI's JavaScript wrote them: ``String(value)`` of a YAML value that js-yaml made.

OpenPAI's rest-server concatenated a parameter into a command with ``+`` and turned every mapping key
into a string with ``String(key)`` (js-yaml 3.13's ``storeMappingPair``); both spell a value as
JavaScript does: numbers in their shortest form (``10.0`` is ``10``, ``1e21`` is ``1e+21``), booleans
``true``/``false``, a list its items joined by ``,`` (null items empty), a mapping ``[object Object]``.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping

OBJECT = "[object Object]"


def js_number(value: float | int) -> str:
    """``Number.prototype.toString()`` of ``value`` (a Python int beyond 2**53 rounded as JavaScript would)."""
    number = float(value) if not isinstance(value, float) else value
    if math.isnan(number):
        return "NaN"
    if math.isinf(number):
        return "Infinity" if number > 0 else "-Infinity"
    if number == 0:
        return "0"
    sign = "-" if number < 0 else ""
    # repr is the shortest text that reads back as the same double, as JavaScript's is.
    mantissa, _, exp_text = repr(abs(number)).partition("e")
    whole, _, frac = mantissa.partition(".")
    digits = (whole + frac).lstrip("0")
    point = len(whole) + (int(exp_text) if exp_text else 0)  # where the point falls in digits
    if whole == "0":  # 0.00123: the point stands before the zeros that follow it
        point -= 1 + len(frac) - len(frac.lstrip("0"))
    digits = digits.rstrip("0") or "0"
    exponent = point - 1
    if -7 < exponent < 21:
        if point <= 0:
            return f"{sign}0.{'0' * -point}{digits}"
        if point >= len(digits):
            return f"{sign}{digits}{'0' * (point - len(digits))}"
        return f"{sign}{digits[:point]}.{digits[point:]}"
    head = digits[0] + (f".{digits[1:]}" if len(digits) > 1 else "")
    return f"{sign}{head}e{'+' if exponent > 0 else '-'}{abs(exponent)}"


def js_string(value: object) -> str:
    """``String(value)`` as JavaScript gives it for a value js-yaml can make."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, int | float):
        return js_number(value)
    if isinstance(value, list | tuple):
        return ",".join("" if item is None else js_string(item) for item in value)
    if isinstance(value, dt.datetime | dt.date):
        return js_iso(value)
    if isinstance(value, Mapping):
        return OBJECT
    return str(value)


def js_iso(value: dt.date) -> str:
    """A YAML timestamp as JSON.stringify wrote js-yaml's Date: ``Date.prototype.toISOString`` (UTC)."""
    if isinstance(value, dt.datetime):
        moment = value.astimezone(dt.UTC) if value.tzinfo else value.replace(tzinfo=dt.UTC)
    else:
        moment = dt.datetime(value.year, value.month, value.day, tzinfo=dt.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"
