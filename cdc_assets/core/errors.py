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
