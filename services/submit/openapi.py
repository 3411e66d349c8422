"""The OpenAPI 3.1 description of the REST API, served at ``/api/v1/openapi.json``.

Its schemas are generated from the models the service reads and answers with: the answers
(:mod:`services.submit.answers`, which every handler answers through) and the error
(:class:`services.submit.errors.Error`), the request bodies (:mod:`services.submit.requests`), the job
config (:mod:`services.submit.configschema`) and the virtual cluster (:mod:`shared.scheduling.vclusters`), all with one
ref template. Every route lists every status it answers with; an error's ``code`` is one of those OpenPAI
answers that status with (:data:`services.submit.errors.STATUS_OF`). Tests check that every route of the
app is described here (and nothing else), that every model is, that the handlers' answers match their
schemas, that the job schema matches the models and the validator, and, with schemathesis against a
running platform, that real answers match the document.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web
from pydantic import BaseModel
from pydantic.json_schema import JsonSchemaMode, models_json_schema

from services.submit.answers import ANSWERS
from services.submit.configschema import REF, job_config_schemas, named_by_path
from services.submit.errors import error_responses as _errors
from services.submit.logs import LOG_PATHS
from services.submit.pages import PORTAL_PATHS
from services.submit.profiles import PROFILE_PATHS
from services.submit.requests import REQUESTS, USER_NAME_SCHEMA
from shared.records import JobState
from shared.scheduling.vclusters import VirtualCluster


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


def _model_schemas() -> dict[str, Any]:
    """Every answer (as it is serialized) and every request body (as it is validated), and the models they
    hold, by class name."""
    modes: list[tuple[type[BaseModel], JsonSchemaMode]] = [(m, "serialization") for m in ANSWERS]
    modes += [(m, "validation") for m in REQUESTS]
    _, generated = models_json_schema(modes, by_alias=True, ref_template=REF)
    schemas: dict[str, Any] = generated["$defs"]
    return schemas


_job_schemas = job_config_schemas()
_vc_schemas = _vc_change()

SCHEMAS: dict[str, Any] = {
    **_model_schemas(),
    "Quota": _vc_schemas["Quota"],
    "VirtualClusterChange": _vc_schemas["VirtualClusterChange"],
    **_job_schemas,
    "JobConfigNamedByPath": named_by_path(_job_schemas["JobConfig"]),
}

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


def _body(schema: dict[str, Any], *, form: bool = False) -> dict[str, Any]:
    media = ("application/json", "application/x-www-form-urlencoded", "multipart/form-data") if form else (
        "application/json",)
    return {"required": True, "content": {m: {"schema": schema} for m in media}}


_AUTH: list[dict[str, list[str]]] = [{"bearer": []}]
_OPTIONAL_AUTH: list[dict[str, list[str]]] = [{}, {"bearer": []}]
_USER_NAME = USER_NAME_SCHEMA
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
_PAGE = {**_json(_ref("JobList"), "jobs"), "headers": {
    "X-Next-Cursor": {"description": "the cursor of the next page; absent on the last", "schema": {"type": "string"}},
    "Link": {"description": '<next page>; rel="next"', "schema": {"type": "string"}}}}
_VC_PARAM = [{"name": "vc", "in": "path", "required": True, "schema": {"type": "string"}}]
_NEW_VC_PARAM = [{"name": "vc", "in": "path", "required": True,
                  "description": "'default' takes only borrowing (its quota is what the others leave; 400)",
                  "schema": {k: v for k, v in _vc_schemas["name"].items() if k != "title"}}]
_ACCEPTED_JOB = {**_json(_ref("Message"), "accepted; Location names the job, warnings (and X-Warning) what was "
                                          "ignored"),
                 "headers": {"Location": {"schema": {"type": "string"}, "description": "the job's URL path"},
                             "X-Warning": {"schema": {"type": "string"}, "description": "the warnings, ' | '"}}}
_HEALTH = _ref("HealthReport")

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
        "requestBody": _body(_ref("TokenRequest"), form=True),
        "responses": {"200": _json(_ref("Token"), "a new token"), **_errors(400, 401, 408, 413)}}},
    "/api/v1": {"get": {"summary": "OpenPAI's API root", "responses": {"200": {
        "description": "<pre>PAI RESTful API</pre>", "content": {"text/html": {"schema": {"type": "string"}}}}}}},
    "/api/v1/user": {
        "put": {"summary": "admin: create a user (modify false) or change one (modify true)", "security": _AUTH,
                "requestBody": _body(_ref("UserChange")),
                "responses": {"200": _json(_ref("Message"), "changed"), "201": _json(_ref("Message"), "created"),
                              **_errors(400, 401, 403, 404, 408, 409, 413)}},
        "get": {"summary": "admin: every user, by name", "security": _AUTH,
                "responses": {"200": _json(_ref("UserList"), "the users"),
                              **_errors(401, 403)}},
        "delete": {"summary": "admin: remove a user who is not an admin (403 RemoveAdminError for an admin, "
                              "yourself included); their tokens end at once, their jobs stay", "security": _AUTH,
                   "requestBody": _body(_ref("UserRemoval")),
                   "responses": {"200": _json(_ref("Message"), "removed"), **_errors(400, 401, 403, 404, 408, 413)}}},
    "/api/v1/user/{user}": {"get": {
        "summary": "a user's profile: one's own, or anyone's for an admin (400 NoUserError for an unknown user, "
                   "as in OpenPAI)", "security": _AUTH, "parameters": _USER_PARAM,
        "responses": {"200": _json(_ref("User"), "the user"),
                      **_errors(400, 401, 403, also={400: ("NoUserError",)})}}},
    "/api/v1/jobs": {"get": {
        "summary": "all jobs, newest first (a page: X-Next-Cursor when more follow)",
        "parameters": [{"name": "username", "in": "query", "schema": _USER_NAME}, *_PAGE_PARAMS],
        "responses": {"200": _PAGE, **_errors(400, 429)}}},
    "/api/v1/user/{user}/jobs": {
        "get": {"summary": "a user's jobs, newest first (a page)", "parameters": [*_USER_PARAM, *_PAGE_PARAMS],
                "responses": {"200": _PAGE, **_errors(400, 429)}},
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
        "requestBody": _body(_ref("ExecutionTypeChange")),
        "responses": {"200": _json(_ref("Message"), "the job had already ended"),
                      "202": _json(_ref("Message"), "stop requested"), **_errors(400, 401, 403, 404, 408, 413)}}},
    "/api/v1/events": {"get": {
        "summary": "live job and task events (CloudEvents) as Server-Sent Events; see shared/schemas/EVENTS.md",
        "parameters": [{"name": n, "in": "query", "schema": {"type": "string"}} for n in ("user", "job")],
        "responses": {"200": {"description": "an endless event stream",
                              "content": {"text/event-stream": {"schema": {"type": "string"}}}}}}},
    "/api/v1/virtual-clusters": {"get": {
        "summary": "virtual clusters: capacity, used, borrowed and lent, jobs per state",
        "responses": {"200": _json(_ref("VirtualClusters"), "")}}},
    **LOG_PATHS,
    **PROFILE_PATHS,
    **PORTAL_PATHS,
    "/api/v1/virtual-clusters/{vc}/queue": {
        "get": {"summary": "paiq: a virtual cluster's queued jobs in the scheduler's order (priority class, then "
                           "the users' shares of the quota, then age), each with why it waits",
                "parameters": _VC_PARAM, "responses": {"200": _json(_ref("Queue"), ""), **_errors(404)}}},
    "/api/v1/virtual-clusters/{vc}": {
        "get": {"summary": "one virtual cluster", "parameters": _VC_PARAM,
                "responses": {"200": _json(_ref("VirtualCluster"), ""), **_errors(404)}},
        "put": {"summary": "admin: create or replace a virtual cluster (quota and borrowing limit in % of the "
                           "cluster, users, groups); 400 when the quotas would pass 100%, or for 'default' with "
                           "more than borrowing", "security": _AUTH, "parameters": _NEW_VC_PARAM,
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
