"""MongoDB, the truth: the store, its indexes and migrations, logs, profiles, tallies, paging,
retries across restarts, and the embedded server of `paiq up`."""
