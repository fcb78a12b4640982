"""One writer per table at a time: sensor runs, UI runs and CLI runs all take this lock."""
from __future__ import annotations

import contextlib
import fcntl
import os
import time


@contextlib.contextmanager
def table_lock(table_dir: str, timeout: float = 3600.0):
    if "://" in table_dir:
        yield  # object stores: Delta's optimistic commits and retries guard them
        return
    os.makedirs(table_dir, exist_ok=True)
    path = os.path.join(table_dir, "_cdc.lock")
    with open(path, "a+") as fh:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{table_dir}: another run holds the table lock") from None
                time.sleep(0.2)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
