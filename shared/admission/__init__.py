"""Whether a submitted job is accepted (pure): protocol v1's validation (:mod:`.validation`), protocol v2's
checks in OpenPAI v1.8's order and its mapping onto the one internal job (:mod:`.v2`), and the sizes a job
would have once stored and once its tasks' environments are built (:mod:`.docsize`, :mod:`.envsize`).
Above the job config, the records, the tasks' environments and the lifecycle whose limits it checks."""
