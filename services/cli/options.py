"""Where the ``paiq`` command's calls go and as whom: the options, else the PAIQ_* variables, else what
``paiq login`` (or ``paiq up``) saved, else the defaults."""

from __future__ import annotations

import argparse
import getpass

from shared.settings.credentials import read_credentials

DEFAULT_API = "http://127.0.0.1:9186"


def saved_login(args: argparse.Namespace) -> dict[str, str]:
    """What ``paiq login`` (or ``paiq up``) saved: api, user, token."""
    return read_credentials(args.env.credentials_path)


def api_of(args: argparse.Namespace) -> str:
    return str(args.api or args.env.api or saved_login(args).get("api") or DEFAULT_API)


def user_of(args: argparse.Namespace) -> str:
    return str(args.user or args.env.user or saved_login(args).get("user") or getpass.getuser())


def token_of(args: argparse.Namespace) -> str | None:
    saved = saved_login(args)
    token = args.env.token or (saved.get("token") if saved.get("api") == api_of(args) else None)
    return token or None
