"""A settings model's refusal as paiq words it: one line naming the variable, its rule and the value.

Pydantic locates an error at the variable a value was read from (``("node", "PAIQ_NODE_ID")`` inside a
part), or at the field itself when its default is wrong (the host name as ``PAIQ_NODE_ID``); either way
the error names the variable to set. Pydantic's own text (many lines and a link) is never shown.
"""

from __future__ import annotations

from annotated_types import Ge, Le
from pydantic.fields import FieldInfo
from pydantic_core import ErrorDetails
from pydantic_settings import BaseSettings

from shared.errors import SettingsError
from shared.settings.source import part_of, variables
from shared.settings.syntax import quoted


def settings_error(model: type[BaseSettings], error: ErrorDetails) -> SettingsError:
    """Pydantic's error as paiq words it: the variable, its rule and the value; never pydantic's text."""
    *path, key = [str(step) for step in error["loc"]] or ["PAIQ_*"]
    var, info = _located(_part_at(model, path)).get(key, (key, None))
    return SettingsError(var, " ".join(_rule(error, info).splitlines()))


def _part_at(model: type[BaseSettings], path: list[str]) -> type[BaseSettings]:
    for name in path:
        info = model.model_fields.get(name)
        part = part_of(info) if info is not None else None
        if part is None:
            break
        model = part
    return model


def _located(model: type[BaseSettings]) -> dict[str, tuple[str, FieldInfo]]:
    """Where an error may be located -> (the variable to name, its field): at the variable a value was read
    from, or at the field itself."""
    found: dict[str, tuple[str, FieldInfo]] = {}
    for name, info in model.model_fields.items():
        names = variables(info, name)
        found[name] = (names[0], info)
        found.update((var, (var, info)) for var in names)
    return found


def bounds(info: FieldInfo) -> tuple[int | None, int | None]:
    """The field's least and most integer (``Field(ge=..., le=...)``), where it has them."""
    least = next((m.ge for m in info.metadata if isinstance(m, Ge) and isinstance(m.ge, int)), None)
    most = next((m.le for m in info.metadata if isinstance(m, Le) and isinstance(m.le, int)), None)
    return least, most


def _rule(error: ErrorDetails, info: FieldInfo | None) -> str:
    ctx = error.get("ctx") or {}
    if error["type"] == "value_error" and "error" in ctx:
        return str(ctx["error"])  # a rule of shared.settings.syntax
    value = error["input"]
    shown = quoted(value) if isinstance(value, str) else repr(value)
    if error["type"] in {"greater_than_equal", "less_than_equal"} and info is not None:
        least, most = bounds(info)
        got = f"{int(value):,}" if isinstance(value, int | str) else shown  # parse_integer took it
        if least is not None and most is not None:
            return f"must be {least:,}-{most:,}, got {got}"
        if least is not None:
            return f"must be >= {least:,}, got {got}"
        return f"must be <= {most:,}, got {got}"
    return f"is not valid ({error['msg'].rstrip('.')}), got {shown}"
