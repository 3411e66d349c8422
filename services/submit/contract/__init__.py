"""What the REST API promises, as values: the Route type (route.py), the bodies it reads (bodies.py,
requests.py, lookup.py for path parameters) and the answers it gives (answers.py, views.py; streams.py: a
body written as it comes), its errors in OpenPAI's words (errors.py, refusals.py, httpparser.py) and the
OpenAPI document generated from them (openapi.py; configschema.py: the job config's JSON Schema, from its
models); /api/v2's shapes in v2/."""
