"""Keeps a test that makes several calls in one epoch-aligned window (RL.SLIDECOUNT's windows are
multiples of the period since the Unix epoch) from straddling that window's edge."""

from __future__ import annotations

import time


def clear_of_minute_edge(margin: float = 2.0) -> None:
    """Returns when at least `margin` seconds are left in the current minute, waiting for the next
    minute when fewer are."""
    left = 60 - time.time() % 60
    if left < margin:
        time.sleep(left + 0.05)
