"""The shapes of OpenPAI v1.8's ``/api/v2`` answers and requests: jobs (jobs.py, rendered by jobviews.py),
users, groups, tokens, virtual clusters and storages (users.py)."""
