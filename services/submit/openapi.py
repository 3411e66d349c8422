"""The OpenAPI 3.1 description of the REST API, served at ``/api/v1/openapi.json``.

The job config's schema is generated from the models that validate it (:mod:`services.submit.jobschema`),
as are the virtual cluster's. Every route lists every status it answers with; an error's ``code`` is
one of those OpenPAI answers that status with. Tests check that every route of the app is described
here (and nothing else), that the job schema matches the models and the validator, and, with
schemathesis against a running platform, that real answers match the document.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from services.submit.errors import STATUS_OF
from services.submit.jobschema import REF, integer_pattern, job_config_schemas, named_by_path
from services.submit.logs import LOG_PATHS
from services.submit.portal import PORTAL_PATHS
from services.submit.users import MAX_PASSWORD_BYTES, MAX_TOKEN_SECONDS, MIN_PASSWORD_LENGTH, USER_PATTERN
from shared.records import JobState
from shared.validation import MAX_CONFIG_BYTES
from shared.vclusters import VirtualCluster
from shared.vitals import HealthReport

_NULLABLE_INT = {"type": ["integer", "null"]}
_NULLABLE_STR = {"type": ["string", "null"]}
_RETRY = {"type": "object", "required": ["user", "platform", "resource"],
          "properties": {k: {"type": "integer"} for k in ("user", "platform", "resource")}}


def _ref(name: str) -> dict[str, str]:
    return {"$ref": REF.format(model=name)}


def _vc_change() -> dict[str, dict[str, Any]]:
    """The body of ``PUT /api/v1/virtual-clusters/{vc}`` and its quota, from the model, and the schema of
    the name the path gives it."""
    schema = VirtualCluster.model_json_schema(ref_template=REF)
    quota = schema.pop("$defs")["Quota"]
    name = schema["properties"].pop("name")
    schema.pop("required")
    schema.pop("title")
    return {"Quota": quota, "VirtualClusterChange": schema, "name": name}


_job_schemas = job_config_schemas()
_vc_schemas = _vc_change()


SCHEMAS: dict[str, Any] = {
    "Error": {"type": "object", "required": ["code", "message"],
              "properties": {"code": {"type": "string", "enum": sorted(STATUS_OF)}, "message": {"type": "string"}}},
    "Message": {"type": "object", "required": ["message"],
                "properties": {"message": {"type": "string"},
                               "warnings": {"type": "array", "items": {"type": "string"}}}},
    "Token": {"type": "object", "required": ["user", "token", "admin"],
              "properties": {"user": {"type": "string"}, "token": {"type": "string"}, "admin": {"type": "boolean"}}},
    "User": {
        "type": "object", "description": "a user as OpenPAI v0.14 answered GET /api/v1/user/:username",
        "required": ["username", "email", "grouplist", "extension", "admin", "virtualCluster"],
        "additionalProperties": False,
        "properties": {
            "username": {"type": "string"}, "email": {"type": "string"},
            "grouplist": {"type": "array", "items": {"type": "string"}},
            "extension": {"type": "object", "required": ["virtualCluster"],
                          "properties": {"virtualCluster": {"type": "array", "items": {"type": "string"}}}},
            "admin": {"type": "boolean"},
            "virtualCluster": {"description": "the virtual clusters the user may submit to",
                               "type": "array", "items": {"type": "string"}}}},
    "SshInfo": {
        "type": "object", "required": ["containers", "keyPair"],
        "properties": {
            "containers": {"type": "array", "items": {
                "type": "object", "required": ["id", "sshIp", "sshPort"],
                "properties": {"id": {"type": "string"}, "sshIp": {"type": "string"},
                               "sshPort": {"type": "string"}, "taskRoleName": {"type": "string"},
                               "taskIndex": {"type": "integer"}}}},
            "keyPair": {"type": "object",
                        "required": ["folderPath", "publicKeyFileName", "privateKeyFileName",
                                     "privateKeyDirectDownloadLink"],
                        "properties": {k: {"type": "string"} for k in (
                            "folderPath", "publicKeyFileName", "privateKeyFileName",
                            "privateKeyDirectDownloadLink")}}}},
    "JobSummary": {
        "type": "object",
        "required": ["name", "username", "state", "subState", "executionType", "retries", "retryDetails",
                     "createdTime", "completedTime", "appExitCode", "virtualCluster", "totalGpuNumber",
                     "totalTaskNumber", "totalTaskRoleNumber"],
        "properties": {
            "name": {"type": "string"}, "username": {"type": "string"},
            "state": {"enum": ["WAITING", "RUNNING", "SUCCEEDED", "FAILED", "STOPPED", "UNKNOWN"]},
            "subState": {"type": "string"}, "reason": {"type": "string"},
            "executionType": {"enum": ["START", "STOP"]}, "retries": {"type": "integer"},
            "retryDetails": _RETRY, "createdTime": {"type": "integer"}, "completedTime": _NULLABLE_INT,
            "appExitCode": _NULLABLE_INT, "virtualCluster": {"type": "string"},
            "totalGpuNumber": {"type": "integer"}, "totalTaskNumber": {"type": "integer"},
            "totalTaskRoleNumber": {"type": "integer"},
        },
    },
    "TaskStatus": {
        "type": "object",
        "required": ["taskIndex", "taskState", "containerId", "containerIp", "containerPorts", "containerGpus",
                     "containerLog", "containerExitCode"],
        "properties": {
            "taskIndex": {"type": "integer"},
            "taskState": {"enum": ["WAITING", "RUNNING", "SUCCEEDED", "FAILED", "STOPPED"]},
            "containerId": _NULLABLE_STR, "containerIp": _NULLABLE_STR, "containerNodeId": _NULLABLE_STR,
            "containerPorts": {"type": "object", "additionalProperties": {"type": "string"}},
            "containerGpus": _NULLABLE_STR, "containerLog": {"type": "string"},
            "containerExitCode": _NULLABLE_INT,
            "subState": {"type": "string"}, "containerKeptUntil": _NULLABLE_INT,
        },
    },
    "JobDetail": {
        "type": "object", "required": ["name", "jobStatus", "taskRoles"],
        "properties": {
            "name": {"type": "string"},
            "jobStatus": {
                "type": "object",
                "required": ["username", "state", "subState", "executionType", "retries", "retryDetails",
                             "createdTime", "completedTime", "appLaunchedTime", "appCompletedTime",
                             "appExitCode", "appExitSpec", "appExitDiagnostics", "appExitTriggerMessage",
                             "appExitTriggerTaskRoleName", "appExitTriggerTaskIndex", "virtualCluster"],
                "properties": {
                    "username": {"type": "string"},
                    "state": {"enum": ["WAITING", "RUNNING", "SUCCEEDED", "FAILED", "STOPPED", "UNKNOWN"]},
                    "subState": {"type": "string"}, "executionType": {"enum": ["START", "STOP"]},
                    "retries": {"type": "integer"}, "retryDetails": _RETRY, "createdTime": {"type": "integer"},
                    "completedTime": _NULLABLE_INT, "appLaunchedTime": _NULLABLE_INT,
                    "appCompletedTime": _NULLABLE_INT, "appExitCode": _NULLABLE_INT,
                    "appExitDiagnostics": {"type": "string"}, "appExitTriggerMessage": {"type": "string"},
                    "appExitTriggerTaskRoleName": _NULLABLE_STR, "appExitTriggerTaskIndex": _NULLABLE_INT,
                    "appExitSpec": {"oneOf": [{"type": "null"}, {
                        "type": "object", "required": ["code", "phrase", "type", "reason"],
                        "properties": {"code": {"type": "integer"}, "phrase": {"type": "string"},
                                       "type": {"type": "string"}, "reason": {"type": "string"}}}]},
                    "attempt": {"type": "integer"}, "retryAt": _NULLABLE_INT,
                    "attempts": {"type": "array", "items": {
                        "type": "object",
                        "required": ["attempt", "exitCode", "exitPhrase", "exitType", "taskStatuses"]}},
                    "virtualCluster": {"type": "string"},
                },
            },
            "taskRoles": {"type": "object", "additionalProperties": {
                "type": "object", "required": ["taskRoleStatus", "taskStatuses"],
                "properties": {"taskRoleStatus": {"type": "object", "required": ["name"]},
                               "taskStatuses": {"type": "array", "items": _ref("TaskStatus")}}}},
        },
    },
    "Resources": {"type": "object", "required": ["cpus", "memoryMB", "gpus"],
                  "properties": {k: {"type": "integer"} for k in ("cpus", "memoryMB", "gpus")}},
    "Quota": _vc_schemas["Quota"],
    "VirtualCluster": {"type": "object", "required": ["name", "quota", "users", "groups", "capacity", "used", "jobs"],
                       "properties": {"name": {"type": "string"}, "quota": _ref("Quota"),
                                      "users": {"type": "array", "items": {"type": "string"}},
                                      "groups": {"type": "array", "items": {"type": "string"}},
                                      "capacity": _ref("Resources"),
                                      "used": _ref("Resources"),
                                      "jobs": {"type": "object", "additionalProperties": {"type": "integer"}}}},
    "VirtualClusterChange": _vc_schemas["VirtualClusterChange"],
    **_job_schemas,
    "JobConfigNamedByPath": named_by_path(_job_schemas["JobConfig"]),
}

# What an error of each status says, and the codes OpenPAI answers it with (errors.STATUS_OF).
_ERROR_MEANING = {
    400: "invalid parameters or body; the message names each problem",
    401: "no bearer token, or an unknown or expired one",
    403: "not allowed to this user",
    404: "not found",
    408: "the body did not arrive within PAIQ_BODY_TIMEOUT_SECONDS",
    409: "conflicts with what exists",
    413: f"the body is over {2 * MAX_CONFIG_BYTES:,} bytes",
}
_HEALTH = HealthReport.model_json_schema()

# What any request may be answered, whatever its route: not statuses of one operation.
_EVERY_ROUTE = (
    "Errors are OpenPAI's {code, message}. Besides what each operation lists, any request may be answered "
    "404 NoApiError (no route at that path), 405 MethodNotAllowedError with an Allow header (a route that "
    "does not serve the method), 400 InvalidParametersError for a request HTTP cannot read, 431 "
    "RequestHeaderFieldsTooLargeError for headers over the limit, 503 ServiceUnavailableError (with "
    "Retry-After) while paiq cannot reach its database or broker, and 500 UnknownError for a failure of "
    "paiq's own (details in the service log, never in the answer).")


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _errors(*statuses: int, also: dict[int, tuple[str, ...]] | None = None) -> dict[str, Any]:
    """Error answers: ``{code, message}`` with the codes of each status (``also``: a route's exceptions)."""
    out = {}
    for status in statuses:
        codes = sorted({c for c, s in STATUS_OF.items() if s == status} | set((also or {}).get(status, ())))
        schema = {"allOf": [_ref("Error")], "properties": {"code": {"enum": codes}}}
        out[str(status)] = _json(schema, f"{_ERROR_MEANING[status]} ({', '.join(codes)})")
    return out


def _body(schema: dict[str, Any], *, form: bool = False) -> dict[str, Any]:
    media = ("application/json", "application/x-www-form-urlencoded", "multipart/form-data") if form else (
        "application/json",)
    return {"required": True, "content": {m: {"schema": schema} for m in media}}


_AUTH: list[dict[str, list[str]]] = [{"bearer": []}]
_OPTIONAL_AUTH: list[dict[str, list[str]]] = [{}, {"bearer": []}]
_USER_NAME = {"type": "string", "pattern": f"^{USER_PATTERN.pattern}$"}
_USER_PARAM = [{"name": "user", "in": "path", "required": True, "schema": _USER_NAME,
                "description": "a user name (400 otherwise)"}]
_JOB_PARAMS = [*_USER_PARAM, {"name": "job", "in": "path", "required": True, "schema": {"type": "string"}}]
_NEW_JOB_PARAMS = [*_USER_PARAM, {"name": "job", "in": "path", "required": True,
                                  "schema": _job_schemas["JobConfig"]["properties"]["jobName"]}]
_PAGE_PARAMS = [
    {"name": "state", "in": "query", "schema": {"type": "string", "enum": [s.value for s in JobState]}},
    {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 10000, "default": 1000}},
    {"name": "offset", "in": "query", "schema": {"type": "integer", "minimum": 0, "maximum": 100000, "default": 0}},
    {"name": "cursor", "in": "query", "description": "X-Next-Cursor of the page before (400 for another string)",
     "schema": {"type": "string"}},
]
_PAGE = {**_json({"type": "array", "items": _ref("JobSummary")}, "jobs"), "headers": {
    "X-Next-Cursor": {"description": "the cursor of the next page; absent on the last", "schema": {"type": "string"}},
    "Link": {"description": '<next page>; rel="next"', "schema": {"type": "string"}}}}
_VC_PARAM = [{"name": "vc", "in": "path", "required": True, "schema": {"type": "string"}}]
_NEW_VC_PARAM = [{"name": "vc", "in": "path", "required": True, "description": "not 'default' (400)",
                  "schema": {k: v for k, v in _vc_schemas["name"].items() if k != "title"}}]
_ACCEPTED_JOB = {**_json(_ref("Message"), "accepted; Location names the job, warnings (and X-Warning) what was "
                                          "ignored"),
                 "headers": {"Location": {"schema": {"type": "string"}, "description": "the job's URL path"},
                             "X-Warning": {"schema": {"type": "string"}, "description": "the warnings, ' | '"}}}
_PASSWORD = {"type": "string", "minLength": MIN_PASSWORD_LENGTH, "maxLength": MAX_PASSWORD_BYTES,
             "description": f"{MIN_PASSWORD_LENGTH} characters to {MAX_PASSWORD_BYTES} bytes of UTF-8 (bcrypt's limit)"}
_TOKEN_REQUEST = {
    "type": "object", "required": ["username", "password"],
    "properties": {"username": _USER_NAME,
                   "password": {**_PASSWORD, "minLength": 1},
                   "expiration": {"anyOf": [{"type": "integer", "minimum": 1, "maximum": MAX_TOKEN_SECONDS},
                                            {"type": "string", "pattern": integer_pattern(1, MAX_TOKEN_SECONDS)}],
                                  "description": "seconds (default 7 days)"}}}
_USER_CHANGE = {
    "type": "object", "required": ["username"],
    "description": "modify false (or absent): create the user, password required; modify true: change what is given",
    "properties": {"username": _USER_NAME,
                   "password": _PASSWORD,
                   "admin": {"type": ["boolean", "null"]},
                   "groups": {"type": ["array", "null"], "items": {"type": "string", "minLength": 1}},
                   "modify": {"type": "boolean"}}}

PATHS: dict[str, Any] = {
    "/healthz": {"get": {"summary": "readiness: the database and broker reachable and every loop working",
                         "responses": {"200": _json(_HEALTH, "healthy"),
                                       "503": _json(_HEALTH, "unhealthy: reason says the first problem")}}},
    "/livez": {"get": {"summary": "liveness: unhealthy only once a loop has ended (restart the process)",
                       "responses": {"200": _json(_HEALTH, "alive"),
                                     "503": _json(_HEALTH, "a loop ended: restart the process")}}},
    "/metrics": {"get": {"summary": "Prometheus metrics",
                         "responses": {"200": {"description": "metrics in the Prometheus text format",
                                               "content": {"text/plain": {"schema": {"type": "string"}}}}}}},
    "/api/v1/openapi.json": {"get": {"summary": "this document", "responses": {"200": _json({"type": "object"}, "")}}},
    "/api/v1/token": {"post": {
        "summary": "log in: a bearer token (JSON or form body: username, password, expiration seconds)",
        "requestBody": _body(_TOKEN_REQUEST, form=True),
        "responses": {"200": _json(_ref("Token"), "a new token"), **_errors(400, 401, 408, 413)}}},
    "/api/v1": {"get": {"summary": "OpenPAI's API root", "responses": {"200": {
        "description": "<pre>PAI RESTful API</pre>", "content": {"text/html": {"schema": {"type": "string"}}}}}}},
    "/api/v1/user": {
        "put": {"summary": "admin: create a user (modify false) or change one (modify true)", "security": _AUTH,
                "requestBody": _body(_USER_CHANGE),
                "responses": {"200": _json(_ref("Message"), "changed"), "201": _json(_ref("Message"), "created"),
                              **_errors(400, 401, 403, 404, 408, 409, 413)}},
        "get": {"summary": "admin: every user, by name", "security": _AUTH,
                "responses": {"200": _json({"type": "array", "items": _ref("User")}, "the users"),
                              **_errors(401, 403)}},
        "delete": {"summary": "admin: remove a user who is not an admin (403 RemoveAdminError for an admin, "
                              "yourself included); their tokens end at once, their jobs stay", "security": _AUTH,
                   "requestBody": _body({"type": "object", "required": ["username"],
                                         "properties": {"username": _USER_NAME}}),
                   "responses": {"200": _json(_ref("Message"), "removed"), **_errors(400, 401, 403, 404, 408, 413)}}},
    "/api/v1/user/{user}": {"get": {
        "summary": "a user's profile: one's own, or anyone's for an admin (400 NoUserError for an unknown user, "
                   "as in OpenPAI)", "security": _AUTH, "parameters": _USER_PARAM,
        "responses": {"200": _json(_ref("User"), "the user"),
                      **_errors(400, 401, 403, also={400: ("NoUserError",)})}}},
    "/api/v1/jobs": {"get": {
        "summary": "all jobs, newest first (a page: X-Next-Cursor when more follow)",
        "parameters": [{"name": "username", "in": "query", "schema": _USER_NAME}, *_PAGE_PARAMS],
        "responses": {"200": _PAGE, **_errors(400)}}},
    "/api/v1/user/{user}/jobs": {
        "get": {"summary": "a user's jobs, newest first (a page)", "parameters": [*_USER_PARAM, *_PAGE_PARAMS],
                "responses": {"200": _PAGE, **_errors(400)}},
        "post": {"summary": "submit a job as the path's user (an admin too submits only as themself)",
                 "security": _AUTH, "parameters": _USER_PARAM, "requestBody": _body(_ref("JobConfig")),
                 "responses": {"202": _ACCEPTED_JOB, **_errors(400, 401, 403, 404, 408, 409, 413)}}},
    "/api/v1/user/{user}/jobs/{job}": {
        "get": {"summary": "job detail (what the tasks printed only with the owner's or an admin's token)",
                "security": _OPTIONAL_AUTH, "parameters": _JOB_PARAMS,
                "responses": {"200": _json(_ref("JobDetail"), "the job"), **_errors(400, 404)}},
        "put": {"summary": "submit a job named by the path (the body's jobName is required; where it differs, the "
                           "path's name is used and a warning says so)", "security": _AUTH,
                "parameters": _NEW_JOB_PARAMS, "requestBody": _body(_ref("JobConfigNamedByPath")),
                "responses": {"202": _ACCEPTED_JOB, **_errors(400, 401, 403, 404, 408, 409, 413)}},
        "delete": {"summary": "stop (if running) and delete a job", "security": _AUTH, "parameters": _JOB_PARAMS,
                   "responses": {"202": _json(_ref("Message"), "deleted or being stopped"),
                                 **_errors(400, 401, 403, 404)}}},
    "/api/v1/user/{user}/jobs/{job}/config": {"get": {
        "summary": "the config as submitted (JSON, or YAML with Accept: text/yaml)", "parameters": _JOB_PARAMS,
        "responses": {"200": {"description": "the config", "content": {
            "application/json": {"schema": {"type": "object", "description": "as submitted: it passed JobConfig's "
                                            "validation, and keeps its unknown fields and spellings"}},
            "text/yaml": {"schema": {"type": "string"}}}},
            **_errors(400, 404)}}},
    "/api/v1/user/{user}/jobs/{job}/ssh": {"get": {
        "summary": "SSH information (OpenPAI's shape): the running tasks' ssh endpoints and the key pair's files",
        "parameters": _JOB_PARAMS,
        "responses": {"200": _json(_ref("SshInfo"), "ssh info"), **_errors(400, 404)}}},
    "/api/v1/user/{user}/jobs/{job}/ssh/{file}": {"get": {
        "summary": "a key file of the job: <user>~<job>.pub to anyone, the private key <user>~<job> to the "
                   "job's owner or an admin", "security": _OPTIONAL_AUTH, "parameters": [
            *_JOB_PARAMS, {"name": "file", "in": "path", "required": True, "schema": {"type": "string"}}],
        "responses": {"200": {"description": "the key file", "content": {"text/plain": {"schema": {"type": "string"}}}},
                      **_errors(400, 401, 403, 404)}}},
    "/api/v1/user/{user}/jobs/{job}/executionType": {"put": {
        "summary": 'stop a job: {"value": "STOP"}', "security": _AUTH, "parameters": _JOB_PARAMS,
        "requestBody": _body({"type": "object", "required": ["value"], "properties": {"value": {"enum": ["STOP"]}}}),
        "responses": {"200": _json(_ref("Message"), "the job had already ended"),
                      "202": _json(_ref("Message"), "stop requested"), **_errors(400, 401, 403, 404, 408, 413)}}},
    "/api/v1/events": {"get": {
        "summary": "live job and task events (CloudEvents) as Server-Sent Events; see shared/schemas/EVENTS.md",
        "parameters": [{"name": n, "in": "query", "schema": {"type": "string"}} for n in ("user", "job")],
        "responses": {"200": {"description": "an endless event stream",
                              "content": {"text/event-stream": {"schema": {"type": "string"}}}}}}},
    "/api/v1/virtual-clusters": {"get": {
        "summary": "virtual clusters: capacity, used, jobs per state",
        "responses": {"200": _json({"type": "object", "additionalProperties": _ref("VirtualCluster")}, "")}}},
    **LOG_PATHS,
    **PORTAL_PATHS,
    "/api/v1/virtual-clusters/{vc}": {
        "get": {"summary": "one virtual cluster", "parameters": _VC_PARAM,
                "responses": {"200": _json(_ref("VirtualCluster"), ""), **_errors(404)}},
        "put": {"summary": "admin: create or replace a virtual cluster (quota in % of the cluster, users, groups); "
                           "400 when the quotas would pass 100%", "security": _AUTH, "parameters": _NEW_VC_PARAM,
                "requestBody": _body(_ref("VirtualClusterChange")),
                "responses": {"200": _json(_ref("Message"), "saved"), **_errors(400, 401, 403, 408, 413)}},
        "delete": {"summary": "admin: delete a virtual cluster without active jobs (not 'default')",
                   "security": _AUTH, "parameters": _VC_PARAM,
                   "responses": {"200": _json(_ref("Message"), "deleted"), **_errors(400, 401, 403, 404, 409)}}},
}


def document() -> dict[str, Any]:
    return {
        "openapi": "3.1.0",
        "info": {"title": "paiq REST API (OpenPAI v1 compatible)", "version": "1", "description": _EVERY_ROUTE},
        "paths": PATHS,
        "components": {"schemas": SCHEMAS,
                       "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
    }


async def get_openapi(request: web.Request) -> web.Response:
    return web.json_response(document())


def add_openapi_route(app: web.Application) -> None:
    app.router.add_get("/api/v1/openapi.json", get_openapi)
