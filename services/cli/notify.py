"""``paiq notify``: tell me about my jobs. ``email ADDRESS`` (where e-mail goes), ``add email|webhook`` (kinds,
a job name, a format; ``--platform`` for an administrator's webhook told of every user's jobs), ``list``,
``remove ID`` and ``deliveries`` (recent messages, their state and last error). A webhook's signing key is
printed once, when it is added."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from typing import Any

from services.cli.client import PaiqClient, paiq_client
from services.cli.options import api_of, print_answer, token_of
from shared.jobconfig.notifykinds import KIND_NAMES, parse_kinds

PATH = "/api/v1/notifications"


async def _call(client: PaiqClient, method: str, path: str, body: Any = None) -> dict[str, Any]:
    answer, _ = await client._call(method, PATH + path, json=body)  # the client's one request path
    return dict(answer or {})


def _when(ms: int | None) -> str:
    return "-" if not ms else datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")


def subscription_lines(answer: dict[str, Any]) -> list[str]:
    lines = [f"e-mail goes to: {answer.get('email') or '(no address: paiq notify email ADDRESS)'}",
             f"{'ID':17} {'CHANNEL':8} {'KINDS':40} {'JOB':20} TARGET"]
    for s in answer["subscriptions"]:
        target = s["url"] or "your address"
        if s["channel"] == "webhook":
            target += f" ({s['format']})"
        lines.append(f"{s['id']:17} {s['channel']:8} {','.join(s['kinds']):40} {s['job'] or '(all)':20} {target}")
    return lines


def delivery_lines(answer: dict[str, Any]) -> list[str]:
    lines = [f"{'WHEN':19} {'STATE':9} {'TRIES':5} {'KIND':9} {'JOB':24} {'TARGET':30} LAST ERROR"]
    for d in answer["deliveries"]:
        lines.append(f"{_when(d['createdTime']):19} {d['state']:9} {d['tries']:<5} {d['kind']:9} "
                     f"{(d['jobName'] or '-')[:24]:24} {d['target'][:30]:30} {d['lastError'] or ''}")
    return lines


async def _run(args: argparse.Namespace) -> list[str]:
    platform = "?platform=true" if getattr(args, "platform", False) else ""
    async with paiq_client(api_of(args), token_of(args)) as client:
        if args.notify_command == "email":
            return [str((await _call(client, "PUT", "/email", {"email": args.address}))["message"])]
        if args.notify_command == "list":
            return subscription_lines(await _call(client, "GET", f"/subscriptions{platform}"))
        if args.notify_command == "remove":
            return [str((await _call(client, "DELETE", f"/subscriptions/{args.id}{platform}"))["message"])]
        if args.notify_command == "deliveries":
            sep = "&" if platform else "?"
            return delivery_lines(await _call(client, "GET", f"/deliveries{platform}{sep}limit={args.limit}"))
        body: dict[str, Any] = {"channel": args.channel, "kinds": sorted(parse_kinds(args.kinds)),
                                "platform": args.platform}
        if args.url:
            body["url"] = args.url
        if args.job:
            body["job"] = args.job
        if args.channel == "webhook":
            body["format"] = args.format
        added = await _call(client, "POST", "/subscriptions", body)
        out = [f"subscribed: {added['subscription']['id']}"]
        if added.get("secret"):
            out.append(f"signing key (shown this once; X-Paiq-Signature is sha256=HMAC-SHA256 of the body): "
                       f"{added['secret']}")
        return out


async def cmd_notify(args: argparse.Namespace) -> int:
    """A wrong option exits 2, the API's refusal 1, each with one line."""
    return await print_answer(_run(args), wrong=(ValueError,),
                              wrong_prefix=f"paiq notify {args.notify_command}: --kinds")


def add_notify_parser(sub: Any) -> None:
    p = sub.add_parser("notify", help="be told of your jobs' changes by e-mail or webhook")
    ns = p.add_subparsers(dest="notify_command", required=True)
    em = ns.add_parser("email", help="the address your e-mail notifications go to ('' removes it)")
    em.add_argument("address")
    add = ns.add_parser("add", help="subscribe: e-mail (to your address) or a webhook")
    add.add_argument("channel", choices=["email", "webhook"])
    add.add_argument("url", nargs="?", help="the webhook's http(s) URL")
    add.add_argument("--kinds", default="succeeded,failed,stopped",
                     help=f"what to be told of: {KIND_NAMES}, or all (default: succeeded,failed,stopped; a job's "
                          "extras.jobStatusChangeNotification chooses for that job)")
    add.add_argument("--job", help="only this job name of yours (default: all your jobs)")
    add.add_argument("--format", choices=["cloudevents", "chat"], default="cloudevents",
                     help="a webhook's body: a CloudEvent, or {\"text\": ...} for chat webhooks")
    add.add_argument("--platform", action="store_true", help="admin: a webhook told of every user's jobs")
    for name, text in (("list", "your subscriptions"), ("deliveries", "your recent notifications and their state")):
        sp = ns.add_parser(name, help=text)
        sp.add_argument("--platform", action="store_true", help="admin: the platform's webhooks")
        if name == "deliveries":
            sp.add_argument("--limit", type=int, default=50, help="how many of the newest (1-500, default 50)")
    rm = ns.add_parser("remove", help="unsubscribe")
    rm.add_argument("id")
    rm.add_argument("--platform", action="store_true", help="admin: a platform webhook")
