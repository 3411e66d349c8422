"""What a task is given before it runs (pure): its launch spec, PAI_* environment, SSH keys and
file names."""
