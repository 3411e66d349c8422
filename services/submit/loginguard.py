"""Login throttling: what makes guessing passwords slow, and costs the server nothing while it refuses.

Every password check (a login, v1 and v2; a user's ``oldPassword``) that finds the password wrong is counted
against two keys: the user name it was for and the client address it came from. A few failures per key are
free (:data:`USERS`, :data:`ADDRESSES`); after them each failure opens a *window* that doubles with every
further one, up to a cap; while a key's window lasts, a try on that key is refused (429 with ``Retry-After``)
before any password is hashed. A failure is counted when it is answered: tries already being checked when a
window opens are answered as usual (asyncio's thread pool, where bcrypt runs, bounds how many hash at once),
and logins that all come at once with the right password never open a window by themselves.

What it must not do is let an attacker keep a real user out: the user's window is capped at a minute, a
right password (outside a window) clears the user's count, and failures a quarter of an hour old are
forgotten. A right password does not clear the address's count (an attacker with an account of their own
would clear it between guesses). Each table is an LRU of at most
:data:`CAPACITY` keys, so a flood of made-up names or addresses cannot grow the process's memory; a flood
large enough to push a victim's key out needs that many addresses (each one's own failures count too).

The state is the submit process's own: with several submit replicas behind a load balancer, each counts
its own tries, so a guesser spread across N replicas gets up to N times the free failures and windows
that are each replica's. That is the choice made (no shared store read on every login); a deployment that
needs one count puts a single replica, or sticky sessions by client address, in front of the logins.

The client address is what the connection says (aiohttp's ``request.remote``); ``X-Forwarded-For`` is not
read, since paiq has no setting naming trusted proxies. Behind a reverse proxy every client has the proxy's
address, so the address table counts them together (its windows are capped at a minute too).

The thresholds are constants, not settings: the settings table is documented variable by variable
(docs: Configuration), and these are safe for every deployment. Pure: no I/O; the clock is injected.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class Policy:
    """How one key's failures are answered: ``free`` of them cost nothing, then each opens a window of
    ``first_s`` doubled per further failure, at most ``cap_s``; failures ``forget_s`` after the last one are
    counted afresh."""

    free: int
    first_s: float
    cap_s: float
    forget_s: float

    def window_s(self, failures: int) -> float:
        if failures < self.free:
            return 0.0
        return min(self.cap_s, self.first_s * 2.0 ** min(failures - self.free, 64))


# A user name: five tries free, then 1 s, 2 s, 4 s ... up to 60 s (so at most about one guess a minute).
USERS = Policy(free=5, first_s=1.0, cap_s=60.0, forget_s=15 * 60.0)
# A client address: more tries free (one address may be many people: a NAT, a proxy), the same windows; it
# is what slows one guesser who tries many user names.
ADDRESSES = Policy(free=20, first_s=1.0, cap_s=60.0, forget_s=15 * 60.0)
CAPACITY = 10_000  # keys kept per table (user names, addresses): an entry is about 200 bytes


@dataclass(frozen=True)
class Strikes:
    """One key's failures: how many, the last one's time, and when the window they opened ends."""

    failures: int
    last_s: float
    until_s: float


def struck(strikes: Strikes | None, policy: Policy, now: float) -> Strikes:
    """One failure more (the first again when the last is ``forget_s`` old)."""
    failures = 1 if strikes is None or now - strikes.last_s > policy.forget_s else strikes.failures + 1
    return Strikes(failures, now, now + policy.window_s(failures))


class Ledger:
    """The strikes of one kind of key, by key: at most ``capacity`` keys, the least recently struck forgotten."""

    def __init__(self, policy: Policy, capacity: int = CAPACITY) -> None:
        self.policy = policy
        self.capacity = capacity
        self._strikes: OrderedDict[str, Strikes] = OrderedDict()

    def __len__(self) -> int:
        return len(self._strikes)

    def wait_s(self, key: str, now: float) -> float:
        """How long ``key``'s window still lasts (0: none)."""
        strikes = self._strikes.get(key)
        return max(0.0, strikes.until_s - now) if strikes is not None else 0.0

    def strike(self, key: str, now: float) -> None:
        self._strikes[key] = struck(self._strikes.get(key), self.policy, now)
        self._strikes.move_to_end(key)
        while len(self._strikes) > self.capacity:
            self._strikes.popitem(last=False)

    def forget(self, key: str) -> None:
        self._strikes.pop(key, None)


@dataclass(frozen=True)
class Refusal:
    """A try refused: the whole seconds until it may come again (``Retry-After``), and whose window it was."""

    retry_after_s: int
    by: Literal["user", "address"]


class LoginGuard:
    """The two tables, asked around each password check: :meth:`refusal` before it (None: check it), then
    :meth:`failed` (the password was wrong) or :meth:`succeeded` (it was right). ``address`` None (a Unix
    socket) counts the user name only."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, *, users: Policy = USERS,
                 addresses: Policy = ADDRESSES, capacity: int = CAPACITY) -> None:
        self.clock = clock
        self.users = Ledger(users, capacity)
        self.addresses = Ledger(addresses, capacity)

    def refusal(self, user: str, address: str | None) -> Refusal | None:
        now = self.clock()
        by_user = self.users.wait_s(user, now)
        by_address = self.addresses.wait_s(address, now) if address is not None else 0.0
        if by_user <= 0 and by_address <= 0:
            return None
        return Refusal(max(1, math.ceil(max(by_user, by_address))), "user" if by_user >= by_address else "address")

    def failed(self, user: str, address: str | None) -> None:
        now = self.clock()
        self.users.strike(user, now)
        if address is not None:
            self.addresses.strike(address, now)

    def succeeded(self, user: str) -> None:
        """The user's count cleared; the address's stays (a guesser's own account would clear it)."""
        self.users.forget(user)
