"""Code every paiq service shares: job config, events, bus, store, settings and the pure cores."""
