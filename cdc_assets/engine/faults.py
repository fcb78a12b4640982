"""Named crash points for the fault-injection tests.

With CDC_ASSETS_CRASH_AT=<point>[@<n>], the process kills itself with SIGKILL the
n-th time (default the first) it reaches <point>: no cleanup, no flush, exactly
like a machine that dies there. With <point>[@<n>]:TERM it sends itself SIGTERM
there instead, as an operator stopping it would. Unset, a point costs a read of
the environment (engine/settings.py).
"""
from __future__ import annotations

import os
import signal

from .settings import settings

_seen: dict[str, int] = {}


def point(name: str) -> None:
    spec = settings().crash_at
    if not spec:
        return
    spec, _, how = spec.partition(":")
    target, _, nth = spec.partition("@")
    if target != name:
        return
    _seen[name] = _seen.get(name, 0) + 1
    if _seen[name] == int(nth or 1):
        os.kill(os.getpid(), signal.SIGTERM if how == "TERM" else signal.SIGKILL)
