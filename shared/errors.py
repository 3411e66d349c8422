"""One exception base for paiq; subclasses carry the data a caller needs to act on them."""

from __future__ import annotations


class PaiqError(Exception):
    """Base of every error paiq raises on purpose."""


class SettingsError(PaiqError):
    def __init__(self, name: str, rule: str) -> None:
        super().__init__(f"setting {name} {rule}")
        self.name = name
        self.rule = rule


class JobExistsError(PaiqError):
    def __init__(self, job_id: str) -> None:
        super().__init__(f"job {job_id} already exists")
        self.job_id = job_id


class StoreError(PaiqError):
    """The store could not do what was asked (other than a conflict)."""


class SubmitOutcomeUnknownError(StoreError):
    """The database went away while a job was being stored and stayed away too long to tell whether it was."""

    def __init__(self, job_id: str) -> None:
        super().__init__(f"the database did not answer whether job {job_id} was stored")
        self.job_id = job_id


class LeaseLostError(StoreError):
    """A write fenced by a lease was refused: the lease is another's now, or expired."""

    def __init__(self, lease: str, holder: str) -> None:
        super().__init__(f"{holder} no longer holds the {lease} lease")
        self.lease = lease
        self.holder = holder


class BusError(PaiqError):
    """The message bus could not deliver or confirm a message."""


class DriverError(PaiqError):
    """The container engine refused or failed an operation."""

    def __init__(self, message: str, *, exit_code: int, reason: str) -> None:
        super().__init__(message)
        self.exit_code = exit_code
        self.reason = reason


class ListenError(PaiqError):
    """A service could not listen on its port (taken by another process, or not this host's address)."""


class EngineUnreachableError(PaiqError):
    """No container engine answers where the launcher was told to find one."""
