"""A job's and its tasks' lives (pure): the state machine, completion and retry policy, exit codes."""
