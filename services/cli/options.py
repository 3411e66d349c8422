"""Where the ``paiq`` command's calls go and as whom: the options, else the PAIQ_* variables, else what
``paiq login`` (or ``paiq up``) saved, else the defaults; and how a command says the API's refusal."""

from __future__ import annotations

import argparse
import getpass
import sys
from collections.abc import Awaitable, Iterable

from services.cli.client import ApiCallError
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


def say_refusal(e: ApiCallError, prefix: str = "paiq") -> None:
    """The API's refusal in one line on stderr: ``PREFIX: message (code)``."""
    print(f"{prefix}: {e.message} ({e.code})", file=sys.stderr)


async def print_answer(lines: Awaitable[Iterable[str]], *, wrong: tuple[type[Exception], ...] = (),
                       wrong_prefix: str = "paiq", refusal_prefix: str = "paiq") -> int:
    """Run a command's API calls and print the lines they answer: exit 0. A wrong option (one of ``wrong``)
    exits 2 with ``WRONG_PREFIX: error``, the API's refusal 1 with :func:`say_refusal`'s line."""
    try:
        for line in await lines:
            print(line)
    except wrong as e:
        print(f"{wrong_prefix}: {e}", file=sys.stderr)
        return 2
    except ApiCallError as e:
        say_refusal(e, refusal_prefix)
        return 1
    return 0
