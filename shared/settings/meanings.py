"""What each ``PAIQ_*`` variable means, for the operators' configuration table (``docs/operators/configuration.md``,
written by ``python -m shared.settings.reference`` from :class:`shared.settings.model.Settings` and
:class:`~shared.settings.model.CliSettings`: their variables, order, defaults and bounds come from the models; the
words from here). A row may name several variables read together ("where submit listens": host and port); its
``default`` is written where the model's own would mislead (a machine's value, what ``paiq up`` sets, a file
shipped with paiq). Every variable the models read is in exactly one row, and every row's variables are read
(the reference refuses otherwise, and a test fails on a stale page).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Row:
    variables: tuple[str, ...]
    meaning: str
    default: str | None = None  # shown instead of the models' defaults


ROWS: tuple[Row, ...] = (
    Row(('PAIQ_MONGODB_URI',),
        'MongoDB connection string',
        default='embedded SecantusDB (`paiq up` only)'),
    Row(('PAIQ_MONGODB_DATABASE',),
        'database name'),
    Row(('PAIQ_MONGODB_TIMEOUT_SECONDS',),
        "every database call's deadline (the driver's `timeoutMS`): a call on a hung connection fails after "
        'it instead of waiting for ever'),
    Row(('PAIQ_AMQP_URL',),
        'RabbitMQ URL',
        default='in-process bus (`paiq up` only)'),
    Row(('PAIQ_EXCHANGE',),
        'the topic exchange of events'),
    Row(('PAIQ_QUEUE_PREFIX',),
        'prefix of service queues and of the dead-letter exchange/queue (`<prefix>.dead`)'),
    Row(('PAIQ_API_HOST', 'PAIQ_API_PORT'),
        'where submit listens'),
    Row(('PAIQ_DATA_DIR',),
        "embedded database, default file system, and the CLI's saved login (`credentials.json`)",
        default='`~/.paiq`'),
    Row(('PAIQ_DEFAULT_FS_URI',),
        '`$PAI_DEFAULT_FS_URI` of jobs',
        default='`file://$PAIQ_DATA_DIR/fs`'),
    Row(('PAIQ_NODE_ID',),
        "this launcher's node id (letters, digits, `-`, `_`)",
        default='host name'),
    Row(('PAIQ_NODE_IP',),
        'the address tasks on this node are reached at (their `PAI_*_IP` variables; bridge networking publishes their '
        'ports there); never loopback with bridge networking',
        default="bridge: the task network's gateway; host: `127.0.0.1`"),
    Row(('PAIQ_NODE_CPUS', 'PAIQ_NODE_MEMORY_MB'),
        'schedulable capacity of this node',
        default="the machine's"),
    Row(('PAIQ_NODE_GPUS',),
        'GPU inventory: `0:V100,1:V100` or `4xV100`'),
    Row(('PAIQ_NODE_PORT_RANGE',),
        'host ports the scheduler may give tasks on this node',
        default='`20000-29999`'),
    Row(('PAIQ_DOCKER_URL',),
        'the Docker engine',
        default='`DOCKER_HOST` or the local socket'),
    Row(('PAIQ_NODE_NETWORK',),
        "`bridge`: tasks on the task network, isolated from the host's own services and from one another but for "
        "their declared ports, each published 1:1 on `PAIQ_NODE_IP`; `host`: tasks on the host's network, reaching "
        'everything the host listens on (see [Security](../operators/security.md#security))'),
    Row(('PAIQ_TASK_NETWORK',),
        'the Docker network of bridged tasks, made by the launcher (inter-container traffic off); one of that name '
        'that lets its containers talk is refused'),
    Row(('PAIQ_TASK_PIDS_LIMIT',),
        'processes and threads one task may have at once (a fork bomb stays in its container); `0`: no limit'),
    Row(('PAIQ_TASK_DISK_MB', 'PAIQ_TASK_DISK_CHECK_SECONDS'),
        "what a task may write to its container's own file system (not its mounts; its logs are capped apart), "
        'checked this often; past it the task is stopped and fails saying so; `0`: no limit'),
    Row(('PAIQ_GPU_DEVICES',),
        "`nvidia`: a task's GPUs are passed to its container (Docker device requests for NVIDIA's runtime); `none`: "
        "they are only counted, placed and named in the task's environment (a test cluster of declared GPUs on an "
        'engine without them)'),
    Row(('PAIQ_PROFILE_SECONDS',),
        "how often the launcher samples every running task's CPU, memory, network, block I/O and GPU use (0: no "
        'profiling); see [Job profiling](../users/profiling.md#job-profiling)'),
    Row(('PAIQ_GPU_IDLE_PERCENT',),
        "a task's GPUs count as idle while their mean utilisation stays under this percentage"),
    Row(('PAIQ_GPU_IDLE_SECONDS',),
        "how long a task's GPUs must stay idle before the task is flagged (`task.gpu_idle`, a warning on the job, "
        '`paiq_gpu_idle_tasks`)'),
    Row(('PAIQ_PULL_LATEST',),
        '`0` (or `false`): images tagged `latest` are not pulled again at each launch'),
    Row(('PAIQ_CODE_DIR_MAX_MB', 'PAIQ_TASK_LOG_MAX_BYTES', 'PAIQ_DEBUG_KEEP_SECONDS'),
        "largest `codeDir`, cap of a task's stored log, how long a failed debug task's container is kept (see "
        'Containers)',
        default='`200`, 4 MiB, 7 days'),
    Row(('PAIQ_RECONCILE_SECONDS',),
        'period of the level-triggered reconcile passes'),
    Row(('PAIQ_STOP_GRACE_SECONDS',),
        'SIGTERM-to-SIGKILL grace when stopping tasks'),
    Row(('PAIQ_BODY_TIMEOUT_SECONDS',),
        "how long the API waits for a request's body; `408 RequestTimeoutError` after (a body shorter than its "
        'Content-Length)'),
    Row(('PAIQ_ADMIN_USER', 'PAIQ_ADMIN_PASSWORD'),
        "the administrator created at start when missing (an existing user's password is never changed)",
        default='none (`paiq up`: your login name, a generated password)'),
    Row(("PAIQ_PASSWORD_HASH_ROUNDS",),
        "bcrypt's cost for passwords set from now on: each step doubles the work of a login and of every guess "
        "at a stolen hash (12: about a quarter of a CPU-second); a stored password keeps the cost it was set "
        "with. Lower it only for test platforms"),
    Row(('PAIQ_SECRETS_KEY',),
        "the key that seals every credential a job carries in the database: protocol v2 jobs' `secrets` and registry "
        "credentials, each job's SSH private key, webhooks' signing keys (a Fernet key, `python -c 'from "
        "cryptography.fernet import Fernet; print(Fernet.generate_key().decode())'`; several separated by commas: the "
        'first seals, all open; see [Security](../operators/security.md#security) for rotating it). Submit, launcher '
        'and notify need the same. Unset: a job with secrets is refused with 503 naming it, and jobs get no SSH key '
        'pair (their SSH answers say why)',
        default='none (`paiq up`: a key made once in `$PAIQ_DATA_DIR/secrets.key`, mode 0600)'),
    Row(('PAIQ_VIRTUAL_CLUSTERS',),
        "the operator's virtual cluster file (YAML)",
        default='none (only `default`)'),
    Row(('PAIQ_STORAGE_CONFIG',),
        "the operator's storage configs (YAML or JSON; `teamwise_storage`, `GET /api/v2/storages`)",
        default='none (no storages)'),
    Row(('PAIQ_BACKFILL_BOUND_SECONDS',),
        'how long the head of a VC queue may be passed by smaller jobs'),
    Row(('PAIQ_PREEMPTIONS_PER_PASS',),
        'waiting jobs that may have victims chosen in one scheduling pass (`0`: no preemption)'),
    Row(('PAIQ_LEASE_SECONDS',),
        'the scheduler leader lease'),
    Row(('PAIQ_NODE_TIMEOUT_SECONDS',),
        'silence after which a node is lost'),
    Row(('PAIQ_EXIT_SPEC',),
        "the operator's exit-spec table",
        default='the shipped `shared/lifecycle/exitspec.yaml`'),
    Row(('PAIQ_MAX_PLATFORM_RETRIES', 'PAIQ_RETRY_BACKOFF_MS'),
        'retry policy bounds'),
    Row(('PAIQ_OPS_HOST', 'PAIQ_OPS_PORT'),
        '`/healthz` and `/metrics` of scheduler, status, launcher, notify',
        default='`127.0.0.1`, per service 9187-9190'),
    Row(('PAIQ_SCHEDULER_OPS_PORT', 'PAIQ_STATUS_OPS_PORT', 'PAIQ_LAUNCHER_OPS_PORT', 'PAIQ_NOTIFY_OPS_PORT'),
        "one service's ops port, when several share a host (`0`: not set)",
        default='`PAIQ_OPS_PORT`'),
    Row(('PAIQ_SMTP_HOST', 'PAIQ_SMTP_PORT', 'PAIQ_SMTP_TLS'),
        'the SMTP server notifications are mailed through; `PAIQ_SMTP_TLS` `none`, `starttls` (upgrade after '
        'connecting) or `tls` (TLS from the start, port 465); see '
        '[Notifications](../users/notifications.md#notifications)',
        default='none (no email), `587`, `starttls`'),
    Row(('PAIQ_SMTP_USER', 'PAIQ_SMTP_PASSWORD', 'PAIQ_SMTP_FROM'),
        'the SMTP login (none: none) and the sender of notifications'),
    Row(('PAIQ_PORTAL_URL',),
        "the portal's address in notifications' links to a job's page",
        default="the API's address"),
    Row(('PAIQ_NOTIFY_TIMEOUT_SECONDS', 'PAIQ_NOTIFY_ENDPOINT_CONCURRENCY', 'PAIQ_NOTIFY_CONCURRENCY'),
        "one notification try's bound (connect, send, answer); tries at once to one webhook (the SMTP server takes "
        '8), and in all'),
    Row(('PAIQ_NOTIFY_MAX_TRIES', 'PAIQ_NOTIFY_RETRY_BASE_MS', 'PAIQ_NOTIFY_MAX_AGE_SECONDS'),
        "a failing endpoint's tries, the first wait (doubling, at most 5 minutes) and how long after the change the "
        'delivery is given up (failed)'),
    Row(('PAIQ_NOTIFY_RATE_LIMIT', 'PAIQ_NOTIFY_RATE_WINDOW_SECONDS'),
        "messages one recipient gets about one user's jobs per window (`0`: no limit); the window's further changes "
        'come as one digest at its end'),
    Row(('PAIQ_NOTIFY_KEEP_DAYS',),
        'how long delivery records are kept (and shown by `GET /api/v1/notifications/deliveries`)'),
    Row(('PAIQ_NOTIFY_WEBHOOK_ALLOW',),
        "inside destinations users' webhooks may point to: comma-separated host names, addresses and CIDR ranges "
        '(`127.0.0.1,10.0.0.0/8,hooks.internal`; `*`: anything). Unset, loopback, link-local (the metadata endpoint '
        '169.254.169.254), private, 100.64/10 and unique-local addresses are refused when a subscription is made '
        '(400) and after DNS resolution at every delivery (failed, not retried)'),
    Row(('PAIQ_LOG_FORMAT', 'PAIQ_LOG_LEVEL'),
        '`json` for machine-read logs'),
    Row(('PAIQ_EMBEDDED_DB_CACHE',),
        "`paiq up`'s embedded SecantusDB cache (`512M`, `2G`, ...; `auto`: a quarter of the machine's memory, at "
        'least 1 GB, at most 16 GB): it must hold what is stored (see History and scale); `paiq up` warns at start '
        'past 70% of it',
        default='`auto`'),
    Row(('PAIQ_EVENT_RETENTION_HOURS',),
        'how long the journal keeps job and task events for consumers that resume (`Last-Event-ID`, `?since=`, `paiq '
        'events --since`, the notifier after a restart); older asks get `410 Gone` (fractions allowed; `0`: for '
        'ever). See [The event stream](../users/event-stream.md#the-event-stream)'),
    Row(('PAIQ_JOB_RETENTION_DAYS',),
        'ended jobs are deleted, with their attempts, logs and runs, this many days after they ended (fractions '
        'allowed), 100 at a time',
        default='`0` (keep forever)'),
    Row(('PAIQ_ANONYMOUS_HEAVY_READS',),
        'heavy reads a second that callers without a valid token may make, all together (list pages past the first '
        "100 jobs, a job's whole profile), at most 2 at a time; beyond it `429 TooManyRequestsError` with "
        '`Retry-After` (`0`: none without a token)'),
    Row(("PAIQ_MAX_JOB_TASKS",),
        "tasks in one job, all its roles together (every task's environment lists every task's host and ports: "
        "past about 4,400 tasks no task could start; see Limits of a job)"),
    Row(("PAIQ_MAX_TASK_ROLES",),
        "task roles in one job"),
    Row(("PAIQ_MAX_JSON_VALUES",),
        "values in one submitted body, counted from its bytes before it is decoded"),
    Row(("PAIQ_MAX_JSON_DEPTH",),
        "levels of nesting in one submitted body (the protocol nests 5)"),
    Row(("PAIQ_MAX_KEY_BYTES",),
        "bytes of one key of a submitted body"),
    Row(("PAIQ_MAX_STRING_BYTES",),
        "bytes of one string of a submitted body"),
    Row(("PAIQ_MAX_JOB_DOCUMENT_BYTES",),
        "bytes of the job's stored document, estimated before it is stored (MongoDB's limit is 16 MiB)"),
    Row(('PAIQ_WRITE_CREDENTIALS',),
        "`1`: submit saves the administrator's token where the CLI finds it",
        default='none (`paiq up`: `1`)'),
    Row(('PAIQ_API', 'PAIQ_USER', 'PAIQ_TOKEN'),
        "the `paiq` command's server, user and token (`--api` and `--user` come first; the saved token is used only "
        'with the saved server)',
        default='the saved login, else `http://127.0.0.1:9186`, your login name, none'),
)
