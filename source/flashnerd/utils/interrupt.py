"""Ctrl-C between steps: a loop that must save a consistent state stops at a step boundary, not wherever SIGINT lands.

A KeyboardInterrupt raised while PyTorch runs a backward pass can be lost (measured: `flashnerd fit` interrupted in
`loss.backward()` trained on for minutes), so within `DeferredInterrupt` the first SIGINT only sets `requested`,
which the loop checks after each step; a second SIGINT raises KeyboardInterrupt at once.

A loop with a time budget must not spend it while the process is stopped (Ctrl-Z, `kill -STOP` to free the cores for
a while): SIGSTOP cannot be caught, but the SIGCONT that ends it can, and `ContinueCounter` counts those, so a step
that a stop fell into can be told from a slow one.
"""

from __future__ import annotations

import signal
import threading


class DeferredInterrupt:
    """Context manager: SIGINT sets `requested` (a second one raises KeyboardInterrupt). Inactive outside the main
    thread or with `enabled=False` (then SIGINT raises as usual)."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self.requested = False
        self._installed = False
        self._previous = None

    def __enter__(self) -> DeferredInterrupt:
        self.requested = False
        if self.enabled and threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._handle)
            self._installed = True
        return self

    def _handle(self, signum, frame) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True

    def __exit__(self, *exc) -> bool:
        if self._installed:  # a handler installed from C reads as None: Python's own is the closest restorable one
            signal.signal(signal.SIGINT, self._previous if self._previous is not None else signal.default_int_handler)
            self._installed = False
        return False


class ContinueCounter:
    """Context manager: `count` is the number of SIGCONT signals (the end of a stop) received within it. Inactive
    (always 0) outside the main thread or where the platform has no SIGCONT."""

    def __init__(self) -> None:
        self.count = 0
        self._installed = False
        self._previous = None

    def __enter__(self) -> ContinueCounter:
        if hasattr(signal, "SIGCONT") and threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGCONT, self._handle)
            signal.siginterrupt(signal.SIGCONT, False)  # system calls a continue lands in restart, as by default
            self._installed = True
        return self

    def _handle(self, signum, frame) -> None:
        self.count += 1
        if callable(self._previous):
            self._previous(signum, frame)

    def __exit__(self, *exc) -> bool:
        if self._installed:  # a handler installed from C reads as None: the default is the closest restorable one
            signal.signal(signal.SIGCONT, self._previous if self._previous is not None else signal.SIG_DFL)
            self._installed = False
        return False
