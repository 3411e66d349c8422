"""The OpenAPI 3.1 description of the REST API, served at ``/api/v1/openapi.json``.

Its paths are the route table's (:data:`services.submit.routes.table.ROUTES`, each route declared once beside
its handler as a :class:`services.submit.contract.route.Route`), the table aiohttp's router is built from. Its
schemas are generated from the models the service reads and answers with: the answers
(:mod:`services.submit.contract.answers`, which every handler answers through) and the error
(:class:`services.submit.errors.Error`), the request bodies
(:mod:`services.submit.contract.requests`), the job config (:mod:`services.submit.contract.configschema`) and
the virtual cluster (:mod:`shared.scheduling.vclusters`), all with one ref template. Every route lists every
status it answers with; an error's ``code`` is one of those OpenPAI answers that status with
(:data:`services.submit.errors.STATUS_OF`). Tests check that every route of the app is described here (and
nothing else), that every model is, that the handlers' answers match their schemas, that the job schema
matches the models and the validator, and, with schemathesis against a running platform, that real answers
match the document.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import JsonSchemaMode, models_json_schema

from services.submit.contract.answers import ANSWERS
from services.submit.contract.configschema import REF, job_config_schemas, named_by_path
from services.submit.contract.notify import NOTIFY_ANSWERS, NOTIFY_REQUESTS
from services.submit.contract.requests import REQUESTS
from services.submit.contract.route import paths
from services.submit.contract.usage import USAGE_ANSWERS
from services.submit.contract.v2.jobs import v2_job_schemas
from services.submit.contract.v2.users import V2_ANSWERS, V2_REQUESTS
from services.submit.routes.clusters import QUOTA, VC_CHANGE
from services.submit.routes.table import ROUTES
from shared.errors import PaiqError


def _model_schemas() -> dict[str, Any]:
    """Every answer (as it is serialized) and every request body (as it is validated), and the models they
    hold, by class name."""
    modes: list[tuple[type[BaseModel], JsonSchemaMode]] = [(m, "serialization")
                                                           for m in (*ANSWERS, *V2_ANSWERS, *NOTIFY_ANSWERS)]
    modes += [(m, "validation") for m in (*REQUESTS, *V2_REQUESTS, *NOTIFY_REQUESTS)]
    modes += [(m, "serialization") for m in USAGE_ANSWERS]
    _, generated = models_json_schema(modes, by_alias=True, ref_template=REF)
    schemas: dict[str, Any] = generated["$defs"]
    return schemas


class SchemaNameTakenError(PaiqError):
    """Two different schemas registered under one component name: one of them would describe the other's routes."""

    def __init__(self, name: str, first: str, second: str) -> None:
        super().__init__(f"the component name {name!r} is given to two different schemas, both {first} and {second}")
        self.name = name


def named_schemas(*parts: tuple[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The components of each part (what gives them, their schemas by name), merged; a name one part gives a
    schema another part gives differently is :class:`SchemaNameTakenError` (a dict's merge would let the last win,
    silently: a route read one model and was documented with another's schema)."""
    out: dict[str, Any] = {}
    given_by: dict[str, str] = {}
    for source, schemas in parts:
        for name, schema in schemas.items():
            if name in out and out[name] != schema:
                raise SchemaNameTakenError(name, given_by[name], source)
            out[name] = schema
            given_by.setdefault(name, source)
    return out


_job_schemas = job_config_schemas()

SCHEMAS: dict[str, Any] = named_schemas(
    ("the answer and request models", _model_schemas()),
    ("the protocol v2 job", v2_job_schemas()),
    ("the virtual cluster's body (routes/clusters.py)", {"Quota": QUOTA, "VirtualClusterChange": VC_CHANGE}),
    ("the job config", {**_job_schemas, "JobConfigNamedByPath": named_by_path(_job_schemas["JobConfig"])}),
)

# What any request may be answered, whatever its route: not statuses of one operation.
_EVERY_ROUTE = (
    "Errors are OpenPAI's {code, message}. Besides what each operation lists, any request may be answered "
    "404 NoApiError (no route at that path), 405 MethodNotAllowedError with an Allow header (a route that "
    "does not serve the method), 400 InvalidParametersError for a request HTTP cannot read, 431 "
    "RequestHeaderFieldsTooLargeError for headers over the limit, 503 ServiceUnavailableError (with "
    "Retry-After) while paiq cannot reach its database or broker, and 500 UnknownError for a failure of "
    "paiq's own (details in the service log, never in the answer).")


def document() -> dict[str, Any]:
    return {
        "openapi": "3.1.0",
        "info": {"title": "paiq REST API (OpenPAI v1 compatible)", "version": "1", "description": _EVERY_ROUTE},
        "paths": paths(ROUTES),
        "components": {"schemas": SCHEMAS,
                       "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
    }
