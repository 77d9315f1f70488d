"""Which finished requests get a log line: every error, successes as ``access_log_sample``."""

from __future__ import annotations

from collections.abc import Iterator

from proxy.config.route import Route
from proxy.config.settings import Settings
from proxy.observation.access_log import AccessLog

ROUTES = (Route(name="a", upstream="http://127.0.0.1:9"),)


def _access(draws: Iterator[float], **settings: object) -> AccessLog:
    configured = Settings(routes=ROUTES, **settings)
    return AccessLog(lambda: configured, draw=lambda: next(draws))


def test_a_sample_logs_the_successes_whose_draw_is_below_it() -> None:
    """``access_log_sample: 0.25``: a success is logged when its draw is under 0.25."""
    access = _access(iter([0.1, 0.3, 0.24, 0.9]), access_log_sample=0.25)
    assert [access.logs(200) for _ in range(4)] == [True, False, True, False]


def test_errors_are_logged_without_a_draw() -> None:
    """A 4xx/5xx, or an envelope or failure on a 200, is logged and takes no draw."""
    access = _access(iter(()), access_log_sample=0.0)
    assert access.logs(404)
    assert access.logs(503)
    assert access.logs(200, error=True)


def test_access_log_false_logs_even_errors_not() -> None:
    """``access_log: false`` turns every request's line off, errors' too."""
    access = _access(iter(()), access_log=False)
    assert not access.logs(500, error=True)
