"""What goes into a task's container, decided before it starts: its spec (spec.py: labels, pull, command,
environment, resources), the registry login of its image (authfile.py), its code directory (codedir.py)
and its SSH setup (sshsetup.py)."""
