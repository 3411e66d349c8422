"""Job profiling as pure values: what a task used over time, kept bounded, and what that says.

- :mod:`~shared.profiling.usage`: :class:`Usage`, a task's use of CPU, memory, network, disk and GPUs
  over one span of time, and how spans merge.
- :mod:`~shared.profiling.series`: a task's series, in levels that get coarser with age, so that a task
  running for weeks keeps at most :data:`~shared.profiling.series.MAX_POINTS` points.
- :mod:`~shared.profiling.totals`: a task's running totals (core-seconds, GPU-seconds held and used, peak
  memory), and the job's usage summed from its tasks'.
- :mod:`~shared.profiling.idle`: when a task holding GPUs counts as idle, and what it is told.

The launcher samples (services/launcher/profiling/sampling.py) and stores (shared/db/profiles.py); the REST API
and the portal read. Nothing here does I/O.
"""
