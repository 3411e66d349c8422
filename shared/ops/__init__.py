"""What every service process shows its operators, below the bus and the database that report to it: its
vitals (loops, health, outages and back-off: :mod:`.vitals`), its Prometheus metrics and ops port
(:mod:`.metrics`), the listening socket (:mod:`.listen`) and its logs (:mod:`.logsetup`)."""
