"""Signals between steps: Ctrl-C deferred to a step boundary, and the continue that ends a stop counted."""

from __future__ import annotations

import os
import signal

import pytest

from flashnerd.utils.interrupt import ContinueCounter, DeferredInterrupt


def test_the_first_ctrl_c_is_deferred_the_second_raises_and_the_handler_is_restored():
    before = signal.getsignal(signal.SIGINT)
    with DeferredInterrupt() as interrupt:
        os.kill(os.getpid(), signal.SIGINT)
        assert interrupt.requested
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
    assert signal.getsignal(signal.SIGINT) is before
    with DeferredInterrupt(enabled=False), pytest.raises(KeyboardInterrupt):
        os.kill(os.getpid(), signal.SIGINT)


def test_continues_are_counted_within_and_the_handler_is_restored():
    before = signal.getsignal(signal.SIGCONT)
    with ContinueCounter() as continues:
        assert continues.count == 0
        os.kill(os.getpid(), signal.SIGCONT)  # what ends a stop (SIGSTOP itself cannot be caught or sent safely here)
        os.kill(os.getpid(), signal.SIGCONT)
        assert continues.count == 2
    assert signal.getsignal(signal.SIGCONT) == before
    os.kill(os.getpid(), signal.SIGCONT)
    assert continues.count == 2
