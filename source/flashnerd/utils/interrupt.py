"""Ctrl-C between steps: a loop that must save a consistent state stops at a step boundary, not wherever SIGINT lands.

A KeyboardInterrupt raised while PyTorch runs a backward pass can be lost (measured: `flashnerd fit` interrupted in
`loss.backward()` trained on for minutes), so within `DeferredInterrupt` the first SIGINT only sets `requested`,
which the loop checks after each step; a second SIGINT raises KeyboardInterrupt at once.
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
        self._previous = None

    def __enter__(self) -> DeferredInterrupt:
        self.requested = False
        if self.enabled and threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def _handle(self, signum, frame) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True

    def __exit__(self, *exc) -> bool:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
            self._previous = None
        return False
