"""The engine lock: every engine step of the app runs under one process-wide FIFO lock, so that several users'
runs interleave step by step instead of fighting over the cores. The time a thread holds it is charged to that
thread's meter (metering): the public profile's budget of engine seconds per client address."""
from __future__ import annotations

import contextlib
import threading
import time


_meter = threading.local()  # what the engine time this thread takes is charged to (metering)


@contextlib.contextmanager
def metering(charge):
    """Charge the engine time this thread holds ENGINE_LOCK for, until the block ends, to charge(seconds) (the
    public profile's budget of engine seconds per client address); None charges nothing."""
    previous = getattr(_meter, "charge", None)
    _meter.charge = charge
    try:
        yield
    finally:
        _meter.charge = previous


def current_charge():
    """The charge this thread's engine time goes to now (a worker thread takes its starter's)."""
    return getattr(_meter, "charge", None)


class FairLock:
    """A lock that is handed out in arrival order (threading.Lock is not fair: a thread that releases and
    re-acquires at once would keep it, and one user's run would starve the others). The time each holder keeps
    it is charged to the holder's thread's meter (metering)."""

    def __init__(self):
        self._condition = threading.Condition()
        self._next_ticket = 0
        self._serving = 0
        self._held_since = 0.0  # one holder at a time: when the present one got it

    def __enter__(self):
        with self._condition:
            ticket = self._next_ticket
            self._next_ticket += 1
            self._condition.wait_for(lambda: self._serving == ticket)
        self._held_since = time.perf_counter()
        return self

    def __exit__(self, *exc):
        held = time.perf_counter() - self._held_since
        with self._condition:
            self._serving += 1
            self._condition.notify_all()
        charge = current_charge()
        if charge is not None:
            charge(held)

    @property
    def waiting(self) -> int:
        """Holders and waiters (0 when free)."""
        with self._condition:
            return self._next_ticket - self._serving


ENGINE_LOCK = FairLock()
