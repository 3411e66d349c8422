"""pydantic-settings' environment source over a mapping the caller gives, and the parts it reads.

Why a class here at all: pydantic-settings' :class:`EnvSettingsSource` does the reading paiq wants (each
field's variable, the first set one of an ``AliasChoices`` winning, names as spelled, an empty value an
unset one) but only over ``os.environ``. :class:`MappingSource` is that source over the given mapping,
through the one hook pydantic-settings itself overrides for a ``.env`` file (``_load_env_vars``). It adds one
rule: a field with no variable of its own is a *part* of the settings (the node, the launcher, the job
limits), a nested model read from the same mapping by the same source. Nothing else is read: the models'
only pydantic-settings source is their init arguments (``shared.settings.model.EnvModel``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from pydantic import AliasChoices, GetCoreSchemaHandler
from pydantic.fields import FieldInfo
from pydantic_core import CoreSchema, core_schema
from pydantic_settings import BaseSettings, EnvSettingsSource
from pydantic_settings.sources.utils import parse_env_vars


@dataclass(frozen=True)
class ReadAs:
    """A field's ``Annotated`` marker: a frozen dataclass of a pure core that knows no variables (JobLimits)
    is read as ``model`` (its fields under their variables, with their bounds), then made from that."""

    model: type[BaseSettings]

    def __get_pydantic_core_schema__(self, source: type[Any], handler: GetCoreSchemaHandler) -> CoreSchema:
        return core_schema.no_info_after_validator_function(
            lambda part: source(**dict(part)), handler.generate_schema(self.model),
            serialization=core_schema.plain_serializer_function_ser_schema(asdict))


def part_of(info: FieldInfo) -> type[BaseSettings] | None:
    """The model a part is read as; None for a field that is one variable."""
    if info.alias is not None or info.validation_alias is not None:
        return None
    if isinstance(info.annotation, type) and issubclass(info.annotation, BaseSettings):
        return info.annotation
    return next((m.model for m in info.metadata if isinstance(m, ReadAs)), None)


def variables(info: FieldInfo, name: str) -> list[str]:
    """The variables a field is read from, the first set one winning (PAIQ_DOCKER_URL, then DOCKER_HOST)."""
    alias = info.validation_alias or info.alias or name
    if isinstance(alias, AliasChoices):
        return [choice for choice in alias.choices if isinstance(choice, str)]
    return [alias] if isinstance(alias, str) else [name]


def every_variable(model: type[BaseSettings]) -> list[str]:
    """Every variable ``model`` reads, its parts' included, in its order."""
    found: list[str] = []
    for name, info in model.model_fields.items():
        part = part_of(info)
        found += every_variable(part) if part else variables(info, name)
    return found


class MappingSource(EnvSettingsSource):
    """``EnvSettingsSource`` with ``env`` as the environment, and each part read from it the same way."""

    def __init__(self, settings_cls: type[BaseSettings], env: Mapping[str, str]) -> None:
        self.env = env  # before EnvSettingsSource.__init__, which loads the variables
        super().__init__(settings_cls)

    def _load_env_vars(self) -> Mapping[str, str | None]:
        return parse_env_vars(self.env, self.case_sensitive, self.env_ignore_empty, self.env_parse_none_str)

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        part = part_of(field)
        if part is None:
            return super().get_field_value(field, field_name)
        return MappingSource(part, self.env)(), field_name, False

    def prepare_field_value(self, field_name: str, field: FieldInfo, value: Any, value_is_complex: bool) -> Any:
        if part_of(field) is not None:
            return value  # the part's values, already read
        return super().prepare_field_value(field_name, field, value, value_is_complex)
