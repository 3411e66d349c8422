"""MongoDB, the truth: the store, its indexes and migrations, logs, profiles, tallies, the job lists'
pages (lists/), retries across restarts, and the embedded server of `paiq up`."""
