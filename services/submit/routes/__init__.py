"""The REST API's routes: one module per resource (jobs, their lists, SSH, logs, profiles, users and
tokens in access.py, virtual clusters, the event feed, health, the portal's pages), each declaring its
routes beside its handlers, and table.py, the one table of them all that the router and the OpenAPI
document are built from. OpenPAI v1.8's /api/v2 routes are in v2/. A new resource is a module here (or
in v2/), listed in table.py."""
