"""Local ports: a free one to listen on, and who listens on one."""
from __future__ import annotations

import os
import socket


def free_port() -> int:
    """A port nothing listens on now (the OS's pick)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def listeners(port: int) -> set[str]:
    """Local addresses listening on `port`, from /proc/net/tcp{,6} (no extra tools needed)."""
    found = set()
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        if not os.path.exists(name):
            continue
        with open(name) as fh:
            for line in fh.readlines()[1:]:
                local, state = line.split()[1], line.split()[3]
                addr, p = local.rsplit(":", 1)
                if state == "0A" and int(p, 16) == port:  # 0A: LISTEN
                    found.add(addr)
    return found
