"""Usage reports as pure values: what each job held and used, per virtual cluster, user and UTC day.

- :mod:`~shared.usage.days`: UTC days, a held interval split at their midnights, and the date range a
  report may be asked for (its bound and its refusals).
- :mod:`~shared.usage.counting`: a finished job's contributions to the daily rollups: every attempt's
  tasks for the time they held resources (retries and preempted attempts each counted for theirs), GPU and
  CPU time used from the profiler's totals, spread over the days in proportion.
- :mod:`~shared.usage.report`: who may see which rows (the filters a report reads), the rows as the
  report shows them (hours, utilisation), and its CSV.

The status service's store writes the rollups as jobs end (shared/db/usage.py); the REST API, the CLI and
the portal read them. Nothing here does I/O.
"""
