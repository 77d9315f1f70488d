"""Which finished requests get a log line (``access_log``, ``access_log_sample``).

An error is always logged: a status of 400 or above, an envelope, a failure. A success is logged
with probability ``access_log_sample`` (Envoy's runtime sampling of access logs; nginx's
``access_log ... if=`` keeps the lines a condition names). ``access_log: false`` logs none.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from proxy.config.settings import Settings


class AccessLog:
    """The choice, read from the settings in force (a reload changes it) on every request."""

    def __init__(
        self, settings: Callable[[], Settings], draw: Callable[[], float] = random.random
    ) -> None:
        self._settings = settings
        self._draw = draw

    def logs(self, status: int, *, error: bool = False) -> bool:
        """Whether a request answered with ``status`` gets its line (``error``: an envelope or a
        failure came with it, whatever the status)."""
        settings = self._settings()
        if not settings.access_log:
            return False
        if error or status >= 400:
            return True
        sample = settings.access_log_sample
        return sample >= 1.0 or (sample > 0.0 and self._draw() < sample)
