"""The job-config pipeline: a submitted body judged (limits, leniency, validation) into the
internal JobConfig every service reads."""
