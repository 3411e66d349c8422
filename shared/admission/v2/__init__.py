"""Protocol v2's admission: a YAML body checked in OpenPAI v1.8's order (:mod:`.checks`) and mapped onto
:class:`~shared.jobconfig.model.JobConfig` (:mod:`.tojob`). The protocol itself is :mod:`shared.jobconfig.v2`."""
