"""SSH into a job's tasks, as OpenPAI offered it: a key pair made for each job at submit, the job's
SSH info (``GET .../ssh``, OpenPAI's shape), and the key files (``GET .../ssh/{file}``: the private
key only for the job's owner or an admin). The private key is never logged, never in an event, a job
document or a list answer, and sealed at rest with ``PAIQ_SECRETS_KEY`` (:mod:`shared.tasks.jobkeys`):
opened here only to answer its download. A platform without that key makes no key pairs: its jobs run,
and their SSH answers say why they have none.
"""

from __future__ import annotations

from urllib.parse import quote

from aiohttp import web
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from pydantic import SecretStr

from services.submit.contract.answers import KeyPair, SshContainer, SshInfo, answer
from services.submit.contract.lookup import JOB_PARAMS, job_or_404
from services.submit.contract.route import Param, Reply, Route, text
from services.submit.deps import DEPS
from services.submit.errors import ApiError, shown
from services.submit.routes.access import principal_of
from shared.jobconfig.model import JobConfig
from shared.jobconfig.sealing import SETTING, SealingError
from shared.records import JobRecord, TaskState, now_ms
from shared.tasks.jobkeys import USER_KEY_VARIABLE, JobKey, StoredJobKey, user_keys
from shared.tasks.launchspec import container_name


def requested_user_keys(config: JobConfig) -> tuple[str, ...]:
    """The user's own public keys from jobEnvs (``PAI_SSH_PUB_KEY``); 400 naming the field if malformed."""
    value = config.job_envs.get(USER_KEY_VARIABLE)
    if value is None:
        return ()
    keys = user_keys(value) if isinstance(value, str) else "must be a string"
    if isinstance(keys, str):
        raise ApiError("InvalidParametersError", f"jobEnvs.{USER_KEY_VARIABLE}: {keys}")
    return keys


def new_job_key(job: JobRecord, admitted: tuple[str, ...]) -> JobKey:
    """A fresh Ed25519 key pair for the job (OpenSSH formats), with the user's own keys admitted."""
    private = Ed25519PrivateKey.generate()
    pem = private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                serialization.NoEncryption()).decode()
    public = private.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                               serialization.PublicFormat.OpenSSH).decode()
    key = JobKey(job_id=job.id, user=job.user, job_name=job.name, private_key=SecretStr(pem), public_key=public,
                 user_keys=admitted, created_ms=now_ms())
    return key.model_copy(update={"public_key": f"{public} paiq:{key.name}"})


def stored_job_key(job: JobRecord, admitted: tuple[str, ...], secrets_key: str | None) -> StoredJobKey | None:
    """The key pair a new job is stored with, sealed; None without ``PAIQ_SECRETS_KEY`` (never in clear)."""
    return new_job_key(job, admitted).sealed(secrets_key) if secrets_key else None


def key_folder(api_url: str, job: JobRecord) -> str:
    return f"{api_url.rstrip('/')}/api/v1/user/{quote(job.user)}/jobs/{quote(job.name)}/ssh/"


def ssh_info(job: JobRecord, key: StoredJobKey, api_url: str) -> SshInfo:
    """OpenPAI's answer of ``GET .../ssh``: a container for every running task that has an ssh port
    (``id`` is its ``PAI_CONTAINER_ID``; paiq adds the task's role and index), and where the keys are."""
    containers = tuple(
        SshContainer(id=container_name(job.id, job.attempt, t.role, t.index, t.retries), ssh_ip=t.ip,
                     ssh_port=str(t.ports["ssh"][0]), task_role_name=t.role, task_index=t.index)
        for t in job.tasks if t.state == TaskState.RUNNING and t.ip and t.ports.get("ssh")
    )
    folder = key_folder(api_url, job)
    return SshInfo(containers=containers, key_pair=KeyPair(
        folder_path=folder, public_key_file_name=f"{key.name}.pub", private_key_file_name=key.name,
        private_key_direct_download_link=folder + quote(key.name)))


async def _job_and_key(request: web.Request) -> tuple[JobRecord, StoredJobKey]:
    job = await job_or_404(request)
    deps = request.app[DEPS]
    key = await deps.store.job_key(job.id)
    if key is None:
        why = (f"this platform keeps jobs' SSH private keys sealed with {SETTING}, which its operator has not set, "
               "so its jobs get no key pair" if not deps.settings.secrets_key else
               f"it was submitted before paiq made key pairs, or while the platform had no {SETTING}")
        raise ApiError("NoJobSshInfoError", f"job {job.name} has no SSH information: {why}")
    return job, key


def _private_key(job: JobRecord, key: StoredJobKey, secrets_key: str | None) -> str:
    """The private key opened for its download: 503 naming PAIQ_SECRETS_KEY when this service cannot."""
    try:
        return key.opened(secrets_key).private_key.get_secret_value()
    except SealingError as e:
        raise ApiError("ServiceUnavailableError", f"the private key of job {job.name} cannot be given: {e}") from None


async def get_job_ssh(request: web.Request) -> web.Response:
    """Open to all, as in OpenPAI (the job's detail shows the same hosts and ports)."""
    job, key = await _job_and_key(request)
    return answer(ssh_info(job, key, request.app[DEPS].settings.api_url))


async def get_key_file(request: web.Request) -> web.Response:
    """The public key to anyone; the private key to the job's owner or an admin only."""
    job, key = await _job_and_key(request)
    wanted = request.match_info["file"]
    if wanted == f"{key.name}.pub":
        text = f"{key.public_key}\n"
    elif wanted == key.name:
        principal = await principal_of(request)
        if principal.user != job.user and not principal.admin:
            raise ApiError("ForbiddenUserError",
                           f"user {principal.user} may not read the private key of job {job.name} of {job.user}")
        text = _private_key(job, key, request.app[DEPS].settings.secrets_key)
    else:
        raise ApiError("NoJobSshInfoError",
                       f"job {job.name} has no key file {shown(wanted)}; its files are {key.name} and {key.name}.pub")
    return web.Response(text=text, content_type="text/plain", headers={
        "Content-Disposition": f'attachment; filename="{wanted}"'})  # no-store: the route is secret


ROUTES = (
    Route("GET", "/api/v1/user/{user}/jobs/{job}/ssh", get_job_ssh, "SSH information (OpenPAI's shape): the running "
          "tasks' ssh endpoints and the key pair's files", {200: Reply("ssh info", SshInfo)}, (400, 404),
          params=JOB_PARAMS),
    Route("GET", "/api/v1/user/{user}/jobs/{job}/ssh/{file}", get_key_file, "a key file of the job: <user>~<job>.pub "
          "to anyone, the private key <user>~<job> to the job's owner or an admin", {200: text("the key file")},
          (400, 401, 403, 404, 503), auth="optional", params=(*JOB_PARAMS, Param("file", "path")), secret=True),
)
