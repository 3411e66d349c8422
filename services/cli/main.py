"""The ``paiq`` command: run the platform (``up``, ``service``) and use it (``submit``, ``jobs``, ``status``)."""

from __future__ import annotations

import argparse
import asyncio
import getpass
import json
import os
import re
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import aiohttp
import yaml

from services.cli.client import ApiCallError, paiq_client
from services.cli.notify import add_notify_parser, cmd_notify
from services.cli.options import DEFAULT_API, api_of, say_refusal, token_of, user_of
from services.cli.top import follow
from services.cli.usage import add_usage_parser, cmd_usage
from services.cli.vc import add_vc_parser, cmd_vc
from shared.errors import PaiqError
from shared.settings.credentials import write_credentials
from shared.settings.model import CliSettings

FINAL_STATES = {"SUCCEEDED", "FAILED", "STOPPED"}


def parse_args(argv: Sequence[str] | None, environ: Mapping[str, str]) -> argparse.Namespace:
    """The command line, and the variables the CLI reads (``args.env``: CliSettings, read here once)."""
    args = build_parser().parse_args(argv)
    args.env = CliSettings.from_env(environ)
    return args


def _split_job(ref: str, user: str) -> tuple[str, str]:
    """``name`` (the current user's) or ``user~name``."""
    owner, sep, name = ref.partition("~")
    return (owner, name) if sep else (user, ref)


def _ms(value: int | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(value / 1000)) if value else "-"


def protocol_of(file_name: str, config: bytes) -> tuple[int, str]:
    """Which protocol a job file speaks, and the Content-Type to send it as: a ``.yaml``/``.yml`` file or a
    document with ``protocolVersion: 2`` is a v2 job (YAML or JSON); anything else v1's JSON."""
    if Path(file_name).suffix.lower() in (".yaml", ".yml"):
        return 2, "text/yaml"
    try:
        document = json.loads(config)
        content_type = "application/json"
    except ValueError:
        try:
            document = yaml.safe_load(config)
        except yaml.YAMLError:
            return 1, "application/json"  # the API names what is wrong with it
        content_type = "text/yaml"
    if isinstance(document, dict) and document.get("protocolVersion") in (2, "2"):
        return 2, content_type
    return 1, "application/json"


def _submitted_as(headers: dict[str, str], fallback_user: str) -> tuple[str, str]:
    """The user and name the answer's Location names (``/api/v1/user/{user}/jobs/{name}``)."""
    parts = headers.get("Location", "").split("/")
    if len(parts) == 7:
        return unquote(parts[4]), unquote(parts[6])
    return fallback_user, "?"


async def cmd_submit(args: argparse.Namespace) -> int:
    """Either protocol: a v1 JSON config to /api/v1/user/{user}/jobs, a v2 job to /api/v2/jobs."""
    config: bytes = args.config_bytes
    user = user_of(args)
    protocol, content_type = protocol_of(args.file, config)
    async with paiq_client(api_of(args), token_of(args)) as client:
        if protocol == 2:
            body, headers = await client.submit_v2(config, content_type)
        else:
            body, headers = await client.submit(user, config)
        for warning in body.get("warnings", []):
            print(f"warning: {warning}", file=sys.stderr)
        user, name = _submitted_as(headers, user)
        print(f"submitted {user}~{name}")
        if not args.wait:
            return 0
        return await _follow(client, user, str(name))


async def _follow(client: Any, user: str, name: str) -> int:
    seen: tuple[str, str, str] | None = None
    while True:
        status = (await client.job(user, name))["jobStatus"]
        now = (status["state"], status.get("subState") or "", status.get("reason") or "")
        if now != seen:
            extra = f" ({now[1]})" if now[1] else ""
            why = f": {now[2]}" if now[2] else ""
            print(f"{time.strftime('%H:%M:%S')} {user}~{name} {now[0]}{extra}{why}", flush=True)
            seen = now
        if now[0] in FINAL_STATES:
            print(f"{user}~{name} {now[0]}, exit code {status.get('appExitCode')}"
                  + (f": {status['appExitTriggerMessage']}" if status.get("appExitTriggerMessage") else ""))
            return 0 if now[0] == "SUCCEEDED" else 1
        await asyncio.sleep(0.5)


async def cmd_jobs(args: argparse.Namespace) -> int:
    """The newest jobs (``--limit``, 50), or all of them page by page (``--all``); every user's unless
    ``--user`` names one."""
    shown = 0
    print(f"{'JOB':40} {'STATE':10} {'TASKS':>5} {'GPUS':>4} {'EXIT':>5}  CREATED")
    async with paiq_client(api_of(args)) as client:
        async for j in client.iter_jobs(args.user, state=args.state, at_most=None if args.all else args.limit + 1):
            if not args.all and shown == args.limit:
                print(f"... more: paiq jobs --limit {args.limit * 2}, or --all", file=sys.stderr)
                break
            ref = f"{j['username']}~{j['name']}"
            exit_code = "-" if j["appExitCode"] is None else str(j["appExitCode"])
            print(f"{ref:40} {j['state']:10} {j['totalTaskNumber']:>5} {j['totalGpuNumber']:>4} {exit_code:>5}  "
                  f"{_ms(j['createdTime'])}")
            shown += 1
    return 0


async def cmd_queue(args: argparse.Namespace) -> int:
    """A virtual cluster's queue, in the order the scheduler starts it, and why each job waits."""
    async with paiq_client(api_of(args)) as client:
        queue = await client.queue(args.vc)
    print(f"{'#':>4} {'PRIORITY':8} {'SHARE':>5} {'WAITING':>8}  {'JOB':40} REASON")
    now = time.time() * 1000
    for j in queue["jobs"]:
        waited = _duration((now - j["waitingSince"]) / 1000)
        print(f"{j['position']:>4} {j['priority']:8} {j['userShare']:>5.2f} {waited:>8}  "
              f"{j['user'] + '~' + j['name']:40} {j['reason']}")
    if not queue["jobs"]:
        print(f"(virtual cluster {queue['virtualCluster']}'s queue is empty)")
    return 0


def _duration(seconds: float) -> str:
    s = max(0, int(seconds))
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


# --- paiq vc: virtual clusters, their quotas and borrowing limits -------------------------------

async def cmd_status(args: argparse.Namespace) -> int:
    user, name = _split_job(args.job, user_of(args))
    async with paiq_client(api_of(args), token_of(args)) as client:
        job = await client.job(user, name)
    s = job["jobStatus"]
    print(f"job       {user}~{name}\nstate     {s['state']} ({s.get('subState')})")
    if s.get("reason"):
        print(f"reason    {s['reason']}")
    print(f"vc        {s['virtualCluster']}\ncreated   {_ms(s['createdTime'])}\ncompleted {_ms(s['completedTime'])}")
    print(f"exit code {s['appExitCode'] if s['appExitCode'] is not None else '-'}")
    if s.get("appExitTriggerMessage"):
        print(f"why       {s['appExitTriggerMessage']}")
    print(f"\n{'TASK':24} {'STATE':10} {'NODE':16} {'IP':15} {'PORTS':24} EXIT")
    for role, info in job["taskRoles"].items():
        for t in info["taskStatuses"]:
            ports = ";".join(f"{k}:{v}" for k, v in (t.get("containerPorts") or {}).items())
            code = "-" if t["containerExitCode"] is None else t["containerExitCode"]
            print(f"{role + '[' + str(t['taskIndex']) + ']':24} {t['taskState']:10} "
                  f"{t.get('containerNodeId') or '-':16} {t.get('containerIp') or '-':15} {ports or '-':24} {code}")
            if t.get("containerExitDiagnostics"):
                last = t["containerExitDiagnostics"].rstrip().splitlines()[-5:]
                print("\n".join(f"    | {line}" for line in last))
    return 0


async def cmd_top(args: argparse.Namespace) -> int:
    """What each task of a job uses now (CPU, memory, network, disk, GPUs), refreshed until it ends."""
    user, name = _split_job(args.job, user_of(args))
    async with paiq_client(api_of(args), token_of(args)) as client:
        return await follow(client, user, name, once=args.once)


async def cmd_login(args: argparse.Namespace) -> int:
    user = user_of(args)
    if args.password_stdin:
        password = sys.stdin.readline().rstrip("\n")
    else:
        password = getpass.getpass(f"password for {user} at {api_of(args)}: ")
    async with paiq_client(api_of(args)) as client:
        answer = await client.login(user, password)
    path = write_credentials(args.env.credentials_path, api=api_of(args), user=user, token=str(answer["token"]))
    print(f"logged in as {user}{' (admin)' if answer.get('admin') else ''}; token saved in {path}")
    return 0


async def cmd_stop(args: argparse.Namespace) -> int:
    user, name = _split_job(args.job, user_of(args))
    async with paiq_client(api_of(args), token_of(args)) as client:
        answer = await (client.delete(user, name) if args.command == "delete" else client.stop(user, name))
    print(answer.get("message", "done"))
    return 0


async def cmd_logs(args: argparse.Namespace) -> int:
    """``paiq logs JOB [ROLE [INDEX]] [-f] [--tail N] [--attempt K] [--run T]``: one task's log, or every
    matching task's, prefixed; by default each task's last run in the job's current attempt."""
    user, name = _split_job(args.job, user_of(args))
    async with paiq_client(api_of(args), token_of(args)) as client:
        roles = (await client.job(user, name))["taskRoles"]
        tasks = [(role, t["taskIndex"]) for role, info in roles.items() for t in info["taskStatuses"]
                 if args.role in (None, role) and args.index in (None, t["taskIndex"])]
        if not tasks:
            print(f"paiq: job {user}~{name} has no task {args.role}[{args.index}]", file=sys.stderr)
            return 2

        async def show(role: str, index: int) -> None:
            prefix = f"{role}[{index}] | " if len(tasks) > 1 else ""
            async for line in client.task_log(user, name, role, index, tail=args.tail, follow=args.follow,
                                              attempt=args.attempt, run=args.run):
                sys.stdout.write(prefix + line)
                sys.stdout.flush()

        await asyncio.gather(*(show(role, index) for role, index in tasks))
    return 0


def pick_container(info: dict[str, Any], role: str | None, index: int | None) -> dict[str, Any] | str:
    """The task to ssh into (the first running one without ROLE), or why there is none."""
    running = info.get("containers") or []
    for c in running:
        if role in (None, c.get("taskRoleName")) and index in (None, c.get("taskIndex")):
            return dict(c)
    if not running:
        return "no task of the job is running (ssh reaches running tasks only)"
    names = ", ".join(f"{c.get('taskRoleName')} {c.get('taskIndex')}" for c in running)
    return f"no running task {role or ''} {'' if index is None else index}".rstrip() + f"; running: {names}"


def ssh_command(key_path: Path, container: dict[str, Any], command: Sequence[str]) -> list[str]:
    """The ssh command line into a task: root at its host, on its ssh port, with the job's key."""
    return ["ssh", "-i", str(key_path), "-p", str(container["sshPort"]), "-o", "StrictHostKeyChecking=no",
            "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR", "-o", "IdentitiesOnly=yes",
            f"root@{container['sshIp']}", *command]


def _split_ssh_args(rest: Sequence[str]) -> tuple[str | None, int | None, list[str]]:
    """``[ROLE [INDEX]] [-- COMMAND...]``."""
    words = list(rest)
    command: list[str] = []
    if "--" in words:
        at = words.index("--")
        words, command = words[:at], words[at + 1:]
    if len(words) > 2:
        raise ValueError(f"expected [ROLE [INDEX]] before '--', got {' '.join(words)!r}")
    role = words[0] if words else None
    try:
        index = int(words[1]) if len(words) > 1 else None
    except ValueError:
        raise ValueError(f"INDEX must be a number, got {words[1]!r}") from None
    return role, index, command


async def cmd_ssh(args: argparse.Namespace) -> int:
    """``paiq ssh JOB [ROLE [INDEX]] [-- COMMAND...]``: ssh into a running task with the job's key."""
    user, name = _split_job(args.job, user_of(args))
    role, index, command = _split_ssh_args(args.rest)
    async with paiq_client(api_of(args), token_of(args)) as client:
        info = await client.ssh_info(user, name)
        chosen = pick_container(info, role, index)
        if isinstance(chosen, str):
            print(f"paiq: job {user}~{name}: {chosen}", file=sys.stderr)
            return 2
        key_name = str(info["keyPair"]["privateKeyFileName"])
        key = await client.key_file(user, name, key_name)
    folder = args.env.data_dir / "keys"
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    key_path = folder / key_name
    fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(key)
    os.chmod(key_path, 0o600)  # ssh refuses a key others may read
    line = ssh_command(key_path, chosen, command)
    sys.stdout.flush()
    try:
        os.execvp(line[0], line)
    except FileNotFoundError:
        print("paiq: ssh is not installed here (openssh-client)", file=sys.stderr)
        return 2


def describe_event(event: dict[str, Any]) -> str:
    """One line a person reads: time, type, job, and what happened."""
    data = event.get("data") or {}
    what = ""
    if "role" in data:
        what = f"{data['role']}[{data.get('index')}]"
    for key in ("state", "exit_code", "sub_state", "reason", "gpus", "idle_seconds", "peak_percent"):
        if data.get(key) not in (None, ""):
            what += f" {key}={data[key]}"
    return f"{str(event.get('time', ''))[11:23]} {event.get('type', '?'):20} {event.get('subject', '')} {what}".rstrip()


async def cmd_events(args: argparse.Namespace) -> int:
    user, job = (None, None)
    if args.job:
        user, job = _split_job(args.job, user_of(args))
    async with paiq_client(api_of(args)) as client:
        async for event in client.events(user, job, args.since, reconnect=True):
            print(json.dumps(event) if args.json else describe_event(event), flush=True)
    return 0


def cmd_up(args: argparse.Namespace) -> int:
    from services.platform import running_platform
    from shared.ops.logsetup import configure_logging
    from shared.ops.vitals import Vitals
    from shared.runtime.service import freeze_startup_heap, lost_dependency, wait_for_shutdown
    from shared.settings.model import Settings

    env = dict(os.environ)
    if args.port:
        env["PAIQ_API_PORT"] = str(args.port)
    # The local user is the administrator, and the CLI finds a token without logging in.
    env.setdefault("PAIQ_ADMIN_USER", _local_user_name())
    env["PAIQ_WRITE_CREDENTIALS"] = "1"
    settings = Settings.from_env(env)
    configure_logging(settings.log_level, settings.log_format, service="paiq-up")

    async def main() -> str | None:
        vitals = Vitals()
        async with running_platform(settings, vitals):
            print(f"paiq is up: {settings.api_url} (Ctrl-C to stop)", flush=True)
            freeze_startup_heap()
            return await wait_for_shutdown(vitals)

    try:
        fatal = asyncio.run(main())
    except Exception as e:
        lost = lost_dependency(e)
        if lost is None:
            raise
        fatal = lost
    if fatal:
        print(f"paiq up: stopped: {fatal}", file=sys.stderr)
        return 1
    return 0


def _local_user_name() -> str:
    name = getpass.getuser()
    return name if re.fullmatch(r"[A-Za-z0-9_\-.]{1,64}", name) else "admin"


def cmd_service(args: argparse.Namespace) -> int:
    from services.platform import SERVICES
    from shared.runtime.service import run_service

    run_service(args.name, SERVICES[args.name], os.environ)
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="paiq", description="OpenPAI-compatible jobs on Docker hosts.")
    p.add_argument("--api", help=f"paiq REST API (default: $PAIQ_API or {DEFAULT_API})")
    p.add_argument("--user", help="user name (default: $PAIQ_USER or your login name)")
    sub = p.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="run the whole platform in this process")
    up.add_argument("--port", type=int, help="API port (default 9186)")
    svc = sub.add_parser("service", help="run one service (needs PAIQ_MONGODB_URI and PAIQ_AMQP_URL)")
    svc.add_argument("name", choices=["submit", "scheduler", "launcher", "status", "notify"])
    s = sub.add_parser("submit", help="submit an OpenPAI job: a v1 config (JSON), or a protocol v2 job (a .yaml or "
                                      ".yml file, or a document with protocolVersion 2)")
    s.add_argument("file")
    s.add_argument("--wait", action="store_true", help="follow the job to its end; exit 1 unless it succeeded")
    js = sub.add_parser("jobs", help="list jobs, newest first")
    js.add_argument("--state", choices=["WAITING", "RUNNING", "SUCCEEDED", "FAILED", "STOPPED"], help="only these")
    js.add_argument("--limit", type=int, default=50, help="how many of the newest (default 50)")
    js.add_argument("--all", action="store_true", help="every job, page by page")
    lg = sub.add_parser("login", help="get a token and save it for the next commands")
    lg.add_argument("--password-stdin", action="store_true", help="read the password from standard input")
    for verb, text in (("stop", "stop a job"), ("delete", "stop (if running) and delete a job")):
        sp = sub.add_parser(verb, help=text)
        sp.add_argument("job", help="JOB (yours) or USER~JOB")
    ev = sub.add_parser("events", help="follow the live event stream (all jobs, or one job with --job)")
    ev.add_argument("--job", help="JOB (yours) or USER~JOB")
    ev.add_argument("--json", action="store_true", help="print each event as its CloudEvents JSON")
    ev.add_argument("--since", help="first the events after this one: an event's number or id, a time (ISO 8601), "
                                    "or a span ago (10m, 2h, 1d); within PAIQ_EVENT_RETENTION_HOURS")
    qu = sub.add_parser("queue", help="a virtual cluster's queue in the scheduler's order, and why each job waits")
    qu.add_argument("vc", nargs="?", default="default", help="the virtual cluster (default: default)")
    st = sub.add_parser("status", help="show a job and its tasks")
    st.add_argument("job", help="JOB (yours) or USER~JOB")
    tp = sub.add_parser("top", help="what each task of a job uses now (CPU, memory, network, disk, GPUs), live")
    tp.add_argument("job", help="JOB (yours) or USER~JOB")
    tp.add_argument("--once", action="store_true", help="print once and exit (default: refresh until the job ends)")
    lo = sub.add_parser("logs", help="a task's stdout and stderr (all tasks without ROLE, or the role's without INDEX)")
    lo.add_argument("job", help="JOB (yours) or USER~JOB")
    lo.add_argument("role", nargs="?")
    lo.add_argument("index", nargs="?", type=int)
    lo.add_argument("-f", "--follow", action="store_true", help="keep printing new lines until the task ends")
    lo.add_argument("--tail", type=int, help="only the last N lines")
    lo.add_argument("--attempt", type=int, metavar="K", help="the job's attempt K (0 is the first; default: the "
                                                            "current one)")
    lo.add_argument("--run", type=int, metavar="T", help="the task's run T within that attempt (a protocol v2 "
                                                         "job's taskRetryCount re-runs a failed task; 0 is the "
                                                         "first; default: its last)")
    sh = sub.add_parser("ssh", help="ssh into a running task with the job's key (ROLE INDEX, or the first "
                                    "running task; a COMMAND after -- runs instead of a shell)")
    sh.add_argument("job", help="JOB (yours) or USER~JOB")
    sh.add_argument("rest", nargs=argparse.REMAINDER, metavar="[ROLE [INDEX]] [-- COMMAND...]")
    add_vc_parser(sub)
    add_usage_parser(sub)
    add_notify_parser(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = parse_args(argv, os.environ)
    except PaiqError as e:  # a wrong variable: one line, not a traceback
        print(f"paiq: {e}", file=sys.stderr)
        return 2
    if args.command == "up":
        try:
            return cmd_up(args)
        except PaiqError as e:  # a wrong setting or file: one line, not a traceback
            print(f"paiq up: {e}", file=sys.stderr)
            return 2
    if args.command == "service":
        return cmd_service(args)
    if args.command == "submit":
        try:
            args.config_bytes = Path(args.file).read_bytes()
        except OSError as e:
            print(f"paiq: cannot read {args.file}: {e.strerror}", file=sys.stderr)
            return 2
    commands = {"submit": cmd_submit, "jobs": cmd_jobs, "queue": cmd_queue, "status": cmd_status, "login": cmd_login,
                "stop": cmd_stop, "delete": cmd_stop, "logs": cmd_logs, "events": cmd_events, "ssh": cmd_ssh,
                "vc": cmd_vc, "top": cmd_top, "notify": cmd_notify, "usage": cmd_usage}
    try:
        return asyncio.run(commands[args.command](args))
    except ApiCallError as e:
        say_refusal(e)
        return 2
    except (TimeoutError, aiohttp.ClientError, ValueError) as e:
        print(f"paiq: no usable answer from {api_of(args)}: {e or type(e).__name__}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
