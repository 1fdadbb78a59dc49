"""Polling until something holds, for tests that watch processes and servers."""
import time


def wait_for(predicate, timeout: float = 10.0, interval: float = 0.05) -> bool:
    """True as soon as ``predicate()`` is; after ``timeout`` seconds, its last answer."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(interval)
    return bool(predicate())
