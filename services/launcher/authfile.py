"""OpenPAI's registry auth file: three lines, registry server, username, password."""

from __future__ import annotations

from pathlib import Path

from pydantic import SecretStr

from services.launcher.driver import RegistryAuth
from shared.errors import DriverError

EXIT_IMAGE_PULL = 254
DOCKER_HUB = "https://index.docker.io/v1/"


def parse_auth_file(text: str) -> RegistryAuth:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if len(lines) < 3:
        raise DriverError("authFile malformed", exit_code=EXIT_IMAGE_PULL,
                          reason=f"authFile must have 3 lines (registry, username, password); it has {len(lines)}")
    server = DOCKER_HUB if lines[0] in {"docker.io", "index.docker.io"} else lines[0]
    return RegistryAuth(server=server, username=lines[1], password=SecretStr(lines[2]))


def read_auth_file(path: str) -> RegistryAuth:
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise DriverError("authFile unreadable", exit_code=EXIT_IMAGE_PULL,
                          reason=f"authFile {path} cannot be read: {e.strerror}") from e
    return parse_auth_file(text)
