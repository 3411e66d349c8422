"""``paiq vc list|set|delete``: virtual clusters' quotas, borrowing limits and who may use them."""

from __future__ import annotations

import argparse
import math
from typing import Any, NamedTuple

from services.cli.client import ApiCallError, paiq_client
from services.cli.options import api_of, print_answer, token_of
from shared.errors import PaiqError

_RESOURCES = ("gpus", "cpus", "memory")


class VcSpecError(PaiqError):
    """A ``--quota`` / ``--borrowing`` / ``vc set`` argument that cannot be sent: the one line to print."""


class VcChange(NamedTuple):
    """What ``paiq vc set`` was given, and what it sends (``None``: not given, left out of the body)."""

    quota: dict[str, float] | None
    borrowing: dict[str, float] | None
    users: list[str] | None
    groups: list[str] | None


def parse_percents(option: str, text: str) -> dict[str, float]:
    """``gpus=50,cpus=25,memory=25``: percent of the cluster by resource (those left out keep their value)."""
    out: dict[str, float] = {}
    for item in (part.strip() for part in text.split(",")):
        key, sep, value = (word.strip() for word in item.partition("="))
        if not sep or not key:
            raise VcSpecError(f"{option}: expected RESOURCE=PERCENT[,...] with RESOURCE one of "
                              f"{', '.join(_RESOURCES)}, got {item!r}")
        if key not in _RESOURCES:
            raise VcSpecError(f"{option}: unknown resource {key!r} (one of {', '.join(_RESOURCES)})")
        if key in out:
            raise VcSpecError(f"{option}: {key} is given twice")
        try:
            number = float(value)
        except ValueError:
            number = math.nan
        if not math.isfinite(number):
            raise VcSpecError(f"{option}: {key}={value!r} is not a number (percent of the cluster, 0-100)")
        out[key] = number
    return out


def _names(text: str | None) -> list[str] | None:
    return None if text is None else [n.strip() for n in text.split(",") if n.strip()]


def vc_options(args: argparse.Namespace) -> VcChange:
    """``paiq vc set``'s options, read (before anything is asked of the API)."""
    given = VcChange(quota=None if args.quota is None else parse_percents("--quota", args.quota),
                     borrowing=None if args.borrowing is None else parse_percents("--borrowing", args.borrowing),
                     users=_names(args.users), groups=_names(args.groups))
    if given == VcChange(None, None, None, None):
        raise VcSpecError("nothing to set: give --quota, --borrowing, --users or --groups")
    return given


def vc_change(name: str, current: dict[str, Any] | None, given: VcChange) -> VcChange:
    """What ``paiq vc set`` sends: the options given over the VC's current values (``current``: its answer,
    None for a new VC); a resource left out of ``--quota`` or ``--borrowing`` keeps its value too.
    ``default`` is sent only what was given: the API takes its borrowing limit only, and says so when given
    more."""
    if name == "default":
        kept = (current or {}).get("borrowing", {})
        return given._replace(borrowing=None if given.borrowing is None else {**kept, **given.borrowing})
    if current is None:
        if given.quota is None:
            raise VcSpecError(f"virtual cluster {name} does not exist yet: a new one needs --quota")
        return given
    return VcChange(quota={**current["quota"], **(given.quota or {})},
                    borrowing={**current["borrowing"], **(given.borrowing or {})},
                    users=list(current["users"]) if given.users is None else given.users,
                    groups=list(current["groups"]) if given.groups is None else given.groups)


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:.2f}".rstrip("0").rstrip(".")


def _percents(q: dict[str, Any]) -> str:
    return "/".join(_num(q[k]) for k in _RESOURCES)


def _amounts(r: dict[str, Any]) -> str:
    return "/".join(_num(r[k]) for k in ("gpus", "cpus", "memoryMB"))


def vc_table(vcs: dict[str, Any]) -> list[str]:
    """``paiq vc list``'s lines: each VC's quota and borrowing limit, what it uses, borrows and lends."""
    lines = [f"{'NAME':16} {'QUOTA%':14} {'BORROW-LIMIT%':14} {'USED':20} {'BORROWED':20} LENT"]
    for name, vc in vcs.items():
        lines.append(f"{name:16} {_percents(vc['quota']):14} {_percents(vc['borrowing']):14} "
                     f"{_amounts(vc['used']):20} {_amounts(vc['borrowed']):20} {_amounts(vc['lent'])}")
    lines.append("(gpus/cpus/memory: QUOTA% and BORROW-LIMIT% in percent of the cluster; USED, BORROWED and LENT "
                 "in GPUs/CPUs/MB)")
    return lines


async def _vc_set(args: argparse.Namespace, given: VcChange) -> str:
    async with paiq_client(api_of(args), token_of(args)) as client:
        try:
            current: dict[str, Any] | None = await client.virtual_cluster(args.name)
        except ApiCallError as e:
            if e.code != "NoVirtualClusterError":
                raise
            current = None
        change = vc_change(args.name, current, given)
        answer = await client.put_virtual_cluster(args.name, change.quota, change.users, change.groups,
                                                  borrowing=change.borrowing)
    return str(answer.get("message", "done"))


async def _vc_call(args: argparse.Namespace) -> list[str]:
    if args.vc_command == "set":
        return [await _vc_set(args, vc_options(args))]  # a wrong option is said before the API is asked
    async with paiq_client(api_of(args), token_of(args)) as client:
        if args.vc_command == "delete":
            return [str((await client.delete_virtual_cluster(args.name)).get("message", "done"))]
        return vc_table(await client.virtual_clusters())


async def cmd_vc(args: argparse.Namespace) -> int:
    """``paiq vc list|set|delete``: a wrong option exits 2, the API's refusal 1, each with one line."""
    return await print_answer(_vc_call(args), wrong=(VcSpecError,), wrong_prefix=f"paiq vc {args.vc_command}")


def add_vc_parser(sub: Any) -> None:
    vc = sub.add_parser("vc", help="virtual clusters: list them; admins set quotas, borrowing limits and who may "
                                   "use them")
    vsub = vc.add_subparsers(dest="vc_command", required=True)
    vsub.add_parser("list", help="each VC's quota and borrowing limit, and what it uses, borrows and lends")
    vs = vsub.add_parser("set", help="admin: create or change a VC (options not given keep their values)")
    vs.add_argument("name", metavar="NAME")
    percent = "RESOURCE=PERCENT[,...]: gpus, cpus, memory, in percent of the cluster; those left out keep theirs"
    vs.add_argument("--quota", metavar="SPEC", help=f"what the VC is guaranteed ({percent}; a new VC needs it)")
    vs.add_argument("--borrowing", metavar="SPEC", help=f"how far beyond its quota it may run on the others' idle "
                                                        f"capacity ({percent}; 0: it does not borrow)")
    vs.add_argument("--users", metavar="A,B", help="who may submit to it ('*': everyone; '': nobody but --groups)")
    vs.add_argument("--groups", metavar="G,H", help="the groups whose members may submit to it")
    vd = vsub.add_parser("delete", help="admin: delete a VC that has no waiting or running jobs")
    vd.add_argument("name", metavar="NAME")
