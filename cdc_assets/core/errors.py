"""One base for every error cdc_assets raises on purpose, and what a caller may do about it.

`CdcError` is the base. Its two kinds say whether the same call may succeed when made again:
a `TransientError` (a commit lost to another writer, a store or server that did not answer) may;
a `TerminalError` (a configuration, an input or a state that is wrong) fails the same way until
someone changes it. Each concrete error also derives from the builtin its callers caught before
(ValueError, OSError, RuntimeError), so `except ValueError` still catches a ConfigError.
"""
from __future__ import annotations


class CdcError(Exception):
    """Raised by cdc_assets on purpose; `retryable` says whether the same call may succeed again."""

    retryable = False


class TransientError(CdcError):
    """The same call may succeed when made again: another writer, a store or a server was in the way."""

    retryable = True


class TerminalError(CdcError):
    """The same call fails the same way until the configuration, the input or the stored state changes."""


class OutOfOrder(TerminalError, RuntimeError):
    """A step asked for before the step it needs has committed: a batch's staging before its changes,
    an apply before the base import, a batch before an earlier one."""


def retryable_named(cls_name: str) -> bool:
    """Whether an error known only by its class's name (a failure Dagster reports of a step: its
    SerializableErrorInfo keeps the name, not the class) may succeed when made again: a class of that
    name in this hierarchy is retryable, and none of that name is not (two modules may each have an
    error of one name)."""
    found, todo = [], [CdcError]
    while todo:
        kind = todo.pop()
        if kind.__name__ == cls_name:
            found.append(kind)
        todo.extend(kind.__subclasses__())
    return bool(found) and all(kind.retryable for kind in found)
