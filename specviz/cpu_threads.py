"""How torch's CPU threads wait: asleep, not spinning, unless the environment says otherwise.

torch runs a CPU forward's operators on an OpenMP team (libgomp), whose idle threads spin for 300,000 turns
(GOMP_SPINCOUNT) at every barrier before they sleep. A forward of a small model is hundreds of small operators,
so a team of two threads meets a barrier every few microseconds. On a machine with more runnable threads than
cores (other users' runs, a browser drawing the page, a benchmark beside it) the thread that has work to do is
often off the core while its partner spins for it: measured on the 2-core CPU at a load of 11-14, plain decoding
of the default model ran at 0.4 tokens/s with two spinning threads (13 s of CPU for 24 tokens) against 14
tokens/s with two sleeping ones and 5-20 with one thread. OMP_WAIT_POLICY=PASSIVE makes a waiting thread sleep at
once; libgomp reads it when torch loads it, so it is set before torch is imported, and a value already set
(OMP_WAIT_POLICY or GOMP_SPINCOUNT) is left as it is."""
from __future__ import annotations

import os
import sys


def sleep_when_waiting(environ=os.environ, loaded=sys.modules) -> bool:
    """Ask libgomp for passive waiting (OMP_WAIT_POLICY=PASSIVE) where nobody chose a policy and torch is not yet
    loaded (libgomp reads its environment once, as torch loads it). True when it was set here."""
    if "torch" in loaded or "OMP_WAIT_POLICY" in environ or "GOMP_SPINCOUNT" in environ:
        return False
    environ["OMP_WAIT_POLICY"] = "PASSIVE"
    return True
