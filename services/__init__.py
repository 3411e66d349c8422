"""paiq's services: submit, scheduler, launcher and status; each imports ``shared``, never another.

``services.platform`` is the composition root that runs them together, and ``services.cli.main`` the
``paiq`` command; they are not services themselves.
"""
