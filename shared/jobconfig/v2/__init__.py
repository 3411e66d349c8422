"""OpenPAI's job protocol v2 (YAML) onto paiq's one internal job: read (:mod:`.yamlbody`), checked in
OpenPAI v1.8's order (:mod:`.model`, :mod:`.checks`), rendered and masked (:mod:`.render`), mapped onto
:class:`~shared.jobconfig.model.JobConfig` (:mod:`.tojob`) and back (:mod:`.fromjob`). Pure: no I/O."""
