"""The exit spec: meaning of each exit code and the retry policy's reaction to it (a YAML table)."""

from __future__ import annotations

from enum import StrEnum
from importlib import resources
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from shared.errors import SettingsError


class ExitType(StrEnum):
    USER_SUCCESS = "USER_SUCCESS"
    USER_STOP = "USER_STOP"
    USER_FAILURE = "USER_FAILURE"
    PLATFORM_FAILURE = "PLATFORM_FAILURE"
    RESOURCE_ALLOCATION_TIMEOUT = "RESOURCE_ALLOCATION_TIMEOUT"
    UNKNOWN_FAILURE = "UNKNOWN_FAILURE"


class Reaction(StrEnum):
    ALWAYS_RETRY = "ALWAYS_RETRY"
    ALWAYS_BACKOFF_RETRY = "ALWAYS_BACKOFF_RETRY"
    RETRY_TO_MAX = "RETRY_TO_MAX"
    NEVER_RETRY = "NEVER_RETRY"


class ExitSpec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    code: int
    phrase: str
    type: ExitType
    reaction: Reaction
    reason: str
    solution: str = ""


class ExitSpecTable(BaseModel):
    model_config = ConfigDict(frozen=True)
    entries: dict[int, ExitSpec]

    def spec(self, code: int) -> ExitSpec:
        if code in self.entries:
            return self.entries[code]
        if code > 0:
            return ExitSpec(code=code, phrase="UserFailure", type=ExitType.USER_FAILURE,
                            reaction=Reaction.RETRY_TO_MAX, reason=f"The command exited {code}.",
                            solution="Check the task's log.")
        return ExitSpec(code=code, phrase="UnknownFailure", type=ExitType.UNKNOWN_FAILURE,
                        reaction=Reaction.RETRY_TO_MAX, reason=f"The task ended with code {code}.")


def parse_table(text: str, source: str = "exit spec") -> ExitSpecTable:
    try:
        rows = yaml.safe_load(text)
        if not isinstance(rows, list):
            raise SettingsError("PAIQ_EXIT_SPEC", f"{source} must be a YAML list of entries")
        entries = [ExitSpec.model_validate(row) for row in rows]
    except (yaml.YAMLError, ValidationError) as e:
        raise SettingsError("PAIQ_EXIT_SPEC", f"{source} is not a valid exit spec: {e}") from e
    codes = [e.code for e in entries]
    if len(set(codes)) != len(codes):
        raise SettingsError("PAIQ_EXIT_SPEC", f"{source} lists a code more than once")
    return ExitSpecTable(entries={e.code: e for e in entries})


def load_table(path: Path | None = None) -> ExitSpecTable:
    """The operator's table at ``path``, or the one shipped with paiq."""
    if path is not None:
        try:
            return parse_table(path.read_text(), str(path))
        except OSError as e:
            raise SettingsError("PAIQ_EXIT_SPEC", f"cannot read {path}: {e.strerror}") from e
    return parse_table(resources.files("shared.lifecycle").joinpath("exitspec.yaml").read_text(),
                       "shared/lifecycle/exitspec.yaml")
