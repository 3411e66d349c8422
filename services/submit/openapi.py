"""The OpenAPI 3.1 description of the REST API, served at ``/api/v1/openapi.json``.

A test checks that every route of the app is described here (and nothing else), and that real
answers validate against these schemas.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from services.submit.errors import STATUS_OF
from services.submit.logs import LOG_PATHS
from services.submit.portal import PORTAL_PATHS
from shared.records import JobState

_NULLABLE_INT = {"type": ["integer", "null"]}
_NULLABLE_STR = {"type": ["string", "null"]}
_RETRY = {"type": "object", "required": ["user", "platform", "resource"],
          "properties": {k: {"type": "integer"} for k in ("user", "platform", "resource")}}


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


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
    "Quota": {"type": "object", "properties": {k: {"type": "number", "minimum": 0, "maximum": 100}
                                               for k in ("cpus", "memory", "gpus")}},
    "VirtualCluster": {"type": "object", "required": ["name", "quota", "users", "groups", "capacity", "used", "jobs"],
                       "properties": {"name": {"type": "string"}, "quota": _ref("Quota"),
                                      "users": {"type": "array", "items": {"type": "string"}},
                                      "groups": {"type": "array", "items": {"type": "string"}},
                                      "capacity": _ref("Resources"),
                                      "used": _ref("Resources"),
                                      "jobs": {"type": "object", "additionalProperties": {"type": "integer"}}}},
    "JobConfig": {"type": "object", "description": "The OpenPAI v1 job config (see README: The job protocol).",
                  "required": ["jobName", "image", "taskRoles"]},
}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _errors(*codes: int) -> dict[str, Any]:
    return {str(c): _json(_ref("Error"), "an error") for c in codes}


_AUTH: list[dict[str, list[str]]] = [{"bearer": []}]
_JOB_PARAMS = [{"name": "user", "in": "path", "required": True, "schema": {"type": "string"}},
               {"name": "job", "in": "path", "required": True, "schema": {"type": "string"}}]
_USER_PARAM = [_JOB_PARAMS[0]]
_PAGE_PARAMS = [
    {"name": "state", "in": "query", "schema": {"type": "string", "enum": [s.value for s in JobState]}},
    {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 10000, "default": 1000}},
    {"name": "offset", "in": "query", "schema": {"type": "integer", "minimum": 0, "maximum": 100000, "default": 0}},
    {"name": "cursor", "in": "query", "description": "X-Next-Cursor of the page before", "schema": {"type": "string"}},
]
_PAGE = {**_json({"type": "array", "items": _ref("JobSummary")}, "jobs"), "headers": {
    "X-Next-Cursor": {"description": "the cursor of the next page; absent on the last", "schema": {"type": "string"}},
    "Link": {"description": '<next page>; rel="next"', "schema": {"type": "string"}}}}
_VC_PARAM = [{"name": "vc", "in": "path", "required": True, "schema": {"type": "string"}}]

PATHS: dict[str, Any] = {
    "/healthz": {"get": {"summary": "liveness and store reachability",
                         "responses": {"200": _json({"type": "object"}, "healthy")}}},
    "/metrics": {"get": {"summary": "Prometheus metrics",
                         "responses": {"200": {"description": "metrics in the Prometheus text format",
                                               "content": {"text/plain": {"schema": {"type": "string"}}}}}}},
    "/api/v1/openapi.json": {"get": {"summary": "this document", "responses": {"200": _json({"type": "object"}, "")}}},
    "/api/v1/token": {"post": {
        "summary": "log in: a bearer token (JSON or form body: username, password, expiration seconds)",
        "requestBody": {"content": {"application/json": {"schema": {
            "type": "object", "required": ["username", "password"],
            "properties": {"username": {"type": "string"}, "password": {"type": "string"},
                           "expiration": {"type": "integer"}}}}}},
        "responses": {"200": _json(_ref("Token"), "a new token"), **_errors(400, 401)}}},
    "/api/v1": {"get": {"summary": "OpenPAI's API root", "responses": {"200": {
        "description": "<pre>PAI RESTful API</pre>", "content": {"text/html": {"schema": {"type": "string"}}}}}}},
    "/api/v1/user": {
        "put": {"summary": "admin: create a user (modify false) or change one (modify true)", "security": _AUTH,
                "responses": {"200": _json(_ref("Message"), "changed"), "201": _json(_ref("Message"), "created"),
                              **_errors(400, 401, 403, 404, 409)}},
        "get": {"summary": "admin: every user, by name", "security": _AUTH,
                "responses": {"200": _json({"type": "array", "items": _ref("User")}, "the users"),
                              **_errors(401, 403)}},
        "delete": {"summary": "admin: remove a user who is not an admin (403 RemoveAdminError for an admin, "
                              "yourself included); their tokens end at once, their jobs stay", "security": _AUTH,
                   "requestBody": {"content": {"application/json": {"schema": {
                       "type": "object", "required": ["username"], "properties": {"username": {"type": "string"}}}}}},
                   "responses": {"200": _json(_ref("Message"), "removed"), **_errors(400, 401, 403, 404)}}},
    "/api/v1/user/{user}": {"get": {
        "summary": "a user's profile: one's own, or anyone's for an admin (400 NoUserError for an unknown user, "
                   "as in OpenPAI)", "security": _AUTH, "parameters": _USER_PARAM,
        "responses": {"200": _json(_ref("User"), "the user"), **_errors(400, 401, 403)}}},
    "/api/v1/jobs": {"get": {
        "summary": "all jobs, newest first (a page: X-Next-Cursor when more follow)",
        "parameters": [{"name": "username", "in": "query", "schema": {"type": "string"}}, *_PAGE_PARAMS],
        "responses": {"200": _PAGE, **_errors(400)}}},
    "/api/v1/user/{user}/jobs": {
        "get": {"summary": "a user's jobs, newest first (a page)", "parameters": [*_USER_PARAM, *_PAGE_PARAMS],
                "responses": {"200": _PAGE, **_errors(400)}},
        "post": {"summary": "submit a job", "security": _AUTH, "parameters": _USER_PARAM,
                 "requestBody": {"content": {"application/json": {"schema": _ref("JobConfig")}}},
                 "responses": {"202": _json(_ref("Message"), "accepted; Location names the job"),
                               **_errors(400, 401, 403, 404, 409, 413)}}},
    "/api/v1/user/{user}/jobs/{job}": {
        "get": {"summary": "job detail", "parameters": _JOB_PARAMS,
                "responses": {"200": _json(_ref("JobDetail"), "the job"), **_errors(404)}},
        "put": {"summary": "submit a job named by the path (the body's jobName is required; where it differs, the "
                           "path's name is used and a warning says so)", "security": _AUTH, "parameters": _JOB_PARAMS,
                "requestBody": {"content": {"application/json": {"schema": _ref("JobConfig")}}},
                "responses": {"202": _json(_ref("Message"), "accepted; Location names the job"),
                              **_errors(400, 401, 403, 404, 409, 413)}},
        "delete": {"summary": "stop (if running) and delete a job", "security": _AUTH, "parameters": _JOB_PARAMS,
                   "responses": {"202": _json(_ref("Message"), "deleted or being stopped"),
                                 **_errors(401, 403, 404)}}},
    "/api/v1/user/{user}/jobs/{job}/config": {"get": {
        "summary": "the config as submitted (JSON, or YAML with Accept: text/yaml)", "parameters": _JOB_PARAMS,
        "responses": {"200": {"description": "the config", "content": {
            "application/json": {"schema": _ref("JobConfig")}, "text/yaml": {"schema": {"type": "string"}}}},
            **_errors(404)}}},
    "/api/v1/user/{user}/jobs/{job}/ssh": {"get": {
        "summary": "SSH information (OpenPAI's shape): the running tasks' ssh endpoints and the key pair's files",
        "parameters": _JOB_PARAMS,
        "responses": {"200": _json(_ref("SshInfo"), "ssh info"), **_errors(400, 404)}}},
    "/api/v1/user/{user}/jobs/{job}/ssh/{file}": {"get": {
        "summary": "a key file of the job: <user>~<job>.pub to anyone, the private key <user>~<job> to the "
                   "job's owner or an admin", "parameters": [
            *_JOB_PARAMS, {"name": "file", "in": "path", "required": True, "schema": {"type": "string"}}],
        "responses": {"200": {"description": "the key file", "content": {"text/plain": {"schema": {"type": "string"}}}},
                      **_errors(400, 401, 403, 404)}}},
    "/api/v1/user/{user}/jobs/{job}/executionType": {"put": {
        "summary": 'stop a job: {"value": "STOP"}', "security": _AUTH, "parameters": _JOB_PARAMS,
        "requestBody": {"content": {"application/json": {"schema": {
            "type": "object", "required": ["value"], "properties": {"value": {"enum": ["STOP"]}}}}}},
        "responses": {"200": _json(_ref("Message"), "the job had already ended"),
                      "202": _json(_ref("Message"), "stop requested"), **_errors(400, 401, 403, 404)}}},
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
        "put": {"summary": "admin: create or replace a virtual cluster (quota in % of the cluster, users, groups)",
                "security": _AUTH, "parameters": _VC_PARAM,
                "requestBody": {"content": {"application/json": {"schema": {"type": "object", "properties": {
                    "quota": _ref("Quota"), "users": {"type": "array", "items": {"type": "string"}},
                    "groups": {"type": "array", "items": {"type": "string"}}}}}}},
                "responses": {"200": _json(_ref("Message"), "saved"), **_errors(400, 401, 403)}},
        "delete": {"summary": "admin: delete a virtual cluster without active jobs", "security": _AUTH,
                   "parameters": _VC_PARAM,
                   "responses": {"200": _json(_ref("Message"), "deleted"), **_errors(400, 401, 403, 404, 409)}}},
}


def document() -> dict[str, Any]:
    return {
        "openapi": "3.1.0",
        "info": {"title": "paiq REST API (OpenPAI v1 compatible)", "version": "1"},
        "paths": PATHS,
        "components": {"schemas": SCHEMAS,
                       "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
    }


async def get_openapi(request: web.Request) -> web.Response:
    return web.json_response(document())


def add_openapi_route(app: web.Application) -> None:
    app.router.add_get("/api/v1/openapi.json", get_openapi)
