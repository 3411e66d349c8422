"""OpenPAI v1.8's ``/api/v2`` routes: jobs (submit and config in jobs.py, the list in joblist.py, one job's
reads in jobreads.py), the login and tokens (access.py), the user's own profile (profile.py), users and
groups (users.py), virtual clusters, storages and SKU types (clusters.py). Each is listed in ../table.py."""
