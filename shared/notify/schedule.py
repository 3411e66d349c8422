"""When a delivery is tried again, when it is given up, and when a recipient's messages are held for a digest.
Pure.

- A failed try (a 5xx, 408 or 429, a timeout, a refused connection, an SMTP server's temporary refusal) is
  tried again after ``base * 2**(tries-1)`` capped at ``max``, with up to 20% jitter drawn from the delivery's
  id (a replay gives the same schedule); after ``max_tries`` tries, or once the next try would come later
  than ``max_age`` after the change, the delivery is failed. Any other answer (a 4xx, a permanent SMTP refusal)
  fails it at once: trying again would get the same.
- Each recipient may get ``limit`` messages about one user's jobs per window; past that, the window's further
  changes are held and sent as one digest when the window ends.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass


@dataclass(frozen=True)
class RetryPolicy:
    base_ms: int = 1000
    max_ms: int = 300_000
    max_tries: int = 8
    max_age_ms: int = 3_600_000


def retry_delay_ms(policy: RetryPolicy, tries: int, seed: str) -> int:
    """The wait after the ``tries``-th failed try (from 1)."""
    delay = min(policy.max_ms, policy.base_ms * 2 ** max(0, min(tries - 1, 30)))
    jitter = int.from_bytes(hashlib.sha256(f"{seed}/{tries}".encode()).digest()[:2], "big") / 65535
    return int(delay * (1 + 0.2 * jitter))


def next_try_ms(policy: RetryPolicy, tries: int, created_ms: int, now_ms: int, seed: str) -> int | None:
    """When to try again after ``tries`` failed tries; None: give up (failed)."""
    if tries >= policy.max_tries:
        return None
    at = now_ms + retry_delay_ms(policy, tries, seed)
    return None if at - created_ms > policy.max_age_ms else at


def retryable_status(status: int) -> bool:
    return status >= 500 or status in (408, 429)


@dataclass(frozen=True)
class RateLimit:
    limit: int = 20  # messages per recipient and user per window; 0: no limit
    window_ms: int = 3_600_000

    def window(self, now_ms: int) -> int:
        """The start of the window ``now_ms`` is in."""
        return now_ms - now_ms % self.window_ms

    def held(self, count: int) -> bool:
        """Whether the ``count``-th message of a window (from 1) is held for the digest."""
        return self.limit > 0 and count > self.limit
