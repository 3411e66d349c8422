"""The `paiq` command line: its commands, `paiq top`, the REST client and saved credentials."""
