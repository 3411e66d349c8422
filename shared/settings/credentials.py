"""The CLI's saved login: ``$PAIQ_DATA_DIR/credentials.json`` (api, user, token), readable by its owner only.

``paiq login`` writes it, and so does ``paiq up`` for the local administrator; every ``paiq`` command
reads it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

FILE_NAME = "credentials.json"


def credentials_path(data_dir: Path) -> Path:
    return data_dir / FILE_NAME


def write_credentials(path: Path, *, api: str, user: str, token: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump({"api": api, "user": user, "token": token}, f)
    os.chmod(path, 0o600)  # also when the file existed with wider rights
    return path


def read_credentials(path: Path) -> dict[str, str]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return {k: str(v) for k, v in data.items()} if isinstance(data, dict) else {}
