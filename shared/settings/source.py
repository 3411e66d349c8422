"""A pydantic-settings model read from a plain mapping, and its refusals as one-line SettingsErrors.

The mapping is the whole environment: the model's only source must be its init arguments (its
``settings_customise_sources`` returns ``(init_settings,)``), so nothing else is read behind the
caller's back: no ``os.environ``, no ``.env`` file, no secrets directory.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from annotated_types import Ge, Le
from pydantic import AliasChoices, ValidationError
from pydantic.fields import FieldInfo
from pydantic_core import ErrorDetails
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource

from shared.errors import SettingsError
from shared.settings.syntax import quoted

Model = TypeVar("Model", bound=BaseSettings)


def variables(info: FieldInfo, name: str) -> list[str]:
    """The variables a field is read from, the first set one winning (PAIQ_DOCKER_URL, then DOCKER_HOST)."""
    alias = info.validation_alias or info.alias or name
    if isinstance(alias, AliasChoices):
        return [choice for choice in alias.choices if isinstance(choice, str)]
    return [alias] if isinstance(alias, str) else [name]


class MappingSource(PydanticBaseSettingsSource):
    """A plain mapping as the environment: each field's variables, exactly as spelled; an empty value is an
    unset one."""

    def __init__(self, settings_cls: type[BaseSettings], env: Mapping[str, str]) -> None:
        super().__init__(settings_cls)
        self.env = env

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        for var in variables(field, field_name):
            if value := self.env.get(var):
                return value, var, False
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        found = {}
        for name, info in self.settings_cls.model_fields.items():
            value, var, _ = self.get_field_value(info, name)
            if value is not None:
                found[var] = value
        return found


def read(model: type[Model], env: Mapping[str, str]) -> Model:
    """``model`` from ``env``, or the SettingsError of its first wrong variable (in the model's order)."""
    try:
        return model(**MappingSource(model, env)())
    except ValidationError as e:
        # from None: pydantic's account of the same refusal is many lines and a link, and adds nothing.
        raise settings_error(model, e.errors()[0]) from None


def settings_error(model: type[BaseSettings], error: ErrorDetails) -> SettingsError:
    """Pydantic's error as paiq words it: the variable, its rule and the value; never pydantic's text."""
    key = str(error["loc"][0]) if error["loc"] else "PAIQ_*"
    var, info = _located(model).get(key, (key, None))
    return SettingsError(var, " ".join(_rule(error, info).splitlines()))


def _located(model: type[BaseSettings]) -> dict[str, tuple[str, FieldInfo | None]]:
    """Where an error may be located -> (the variable to name, its field): at the variable a value was read
    from, or at the field itself when its default is wrong (the host name as PAIQ_NODE_ID)."""
    found: dict[str, tuple[str, FieldInfo | None]] = {}
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
