"""OpenPAI's job protocol v2 (YAML): read (:mod:`.yamlbody`), its model (:mod:`.model`), rendered and masked
(:mod:`.render`), and a stored job shown back as v2 (:mod:`.fromjob`). Its checks and its mapping onto the one
internal job are :mod:`shared.admission.v2`. Pure: no I/O."""
