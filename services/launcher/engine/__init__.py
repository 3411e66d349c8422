"""The container engine: what the launcher asks of one (driver.py, a small protocol over pydantic values),
Docker behind it (docker_driver.py), and the labels by which a task's container is found again
(tasklabels.py)."""
