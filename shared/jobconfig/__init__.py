"""The job config as users write it (pure): the internal JobConfig every service reads (:mod:`.model`), its
leniency and limits, the problems a config can have (:mod:`.problems`), its sealed secrets, its priority class
and notification switch, and protocol v2's model (:mod:`.v2`). Whether a config is accepted is
:mod:`shared.admission`."""
