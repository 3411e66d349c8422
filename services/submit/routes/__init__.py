"""The REST API's routes: one module per resource (jobs, their lists, SSH, logs, profiles, users and
tokens in access.py, virtual clusters, the event feed, health, the portal's pages), each declaring its
routes beside its handlers, and table.py, the one table of them all that the router and the OpenAPI
document are built from. A new resource (or a resource's /api/v2 routes) is a module here, listed in
table.py."""
