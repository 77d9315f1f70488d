"""The reset forms real rate limiters and maintenance pages send, through a real mend.

Each upstream is a real aiohttp server stating a reset relative to the real clock; the agent's
``retry_after_ms`` must be that wait within 2 s (never 0 for a stated future reset). The bodies
are the ones these upstreams document: hapi-rate-limit answers with Boom's
``tooManyRequests('Rate limit exceeded')``; GitHub's primary rate limit body is the one its REST
documentation shows.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from email.utils import formatdate

from aiohttp import web

from tests.conftest import StartMend, StartUpstream

_GITHUB_BODY = (
    '{"message":"API rate limit exceeded for 203.0.113.7. (But here\'s the good news: '
    "Authenticated requests get a higher rate limit. Check out the documentation for more "
    'details.)","documentation_url":"https://docs.github.com/rest/overview/'
    'resources-in-the-rest-api#rate-limiting"}'
)
_BOOM_429 = '{"statusCode":429,"error":"Too Many Requests","message":"Rate limit exceeded"}'
_MAINTENANCE = (
    "<!DOCTYPE html><html><head><title>Down for maintenance</title></head><body>"
    "<h1>We&rsquo;ll be back soon</h1><p>We are performing scheduled maintenance.</p>"
    "</body></html>"
)


async def _envelope(
    start_upstream: StartUpstream, start_mend: StartMend, answer: Callable[[], web.Response]
) -> dict[str, object]:
    """The envelope for the upstream's ``answer()``, built as the request arrives (the reset is
    relative to the moment the upstream answers, as a real limiter's is)."""

    async def handler(_: web.Request) -> web.Response:
        return answer()

    mend = await start_mend(await start_upstream({"/api/x": handler}))
    response = await mend.client.get("/api/x")
    error = (await response.json())["error"]
    assert isinstance(error, dict)
    return error


async def test_hapi_user_reset_in_epoch_milliseconds(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """hapi-rate-limit's X-RateLimit-UserReset (epoch ms) gives the wait until that moment."""
    answer = lambda: web.Response(  # noqa: E731
        status=429,
        text=_BOOM_429,
        content_type="application/json",
        headers={
            "X-RateLimit-UserLimit": "5",
            "X-RateLimit-UserRemaining": "0",
            "X-RateLimit-UserReset": str(round(time.time() * 1000) + 42_000),
        },
    )
    error = await _envelope(start_upstream, start_mend, answer)
    assert (error["category"], error["retryable"]) == ("rate_limit", True)
    assert abs(int(error["retry_after_ms"]) - 42_000) <= 2000  # type: ignore[call-overload]


async def test_github_403_rate_limit_reset_in_epoch_seconds(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """GitHub's 403 whose body says rate limit, x-ratelimit-reset in epoch seconds: a rate limit,
    retryable, waiting until the reset."""
    answer = lambda: web.Response(  # noqa: E731
        status=403,
        text=_GITHUB_BODY,
        content_type="application/json",
        headers={
            "x-ratelimit-limit": "60",
            "x-ratelimit-remaining": "0",
            "x-ratelimit-used": "60",
            "x-ratelimit-resource": "core",
            "x-ratelimit-reset": str(int(time.time()) + 1800),
        },
    )
    error = await _envelope(start_upstream, start_mend, answer)
    assert (error["category"], error["retryable"]) == ("rate_limit", True)
    assert abs(int(error["retry_after_ms"]) - 1_800_000) <= 2000  # type: ignore[call-overload]


async def test_github_403_rate_limit_without_remaining_header(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """The same 403 with only x-ratelimit-reset (a proxy dropped the others): the body says
    rate limit, and the reset still gives the wait."""
    answer = lambda: web.Response(  # noqa: E731
        status=403,
        text=_GITHUB_BODY,
        content_type="application/json",
        headers={"x-ratelimit-reset": str(int(time.time()) + 600)},
    )
    error = await _envelope(start_upstream, start_mend, answer)
    assert (error["category"], error["retryable"]) == ("rate_limit", True)
    assert abs(int(error["retry_after_ms"]) - 600_000) <= 2000  # type: ignore[call-overload]


async def test_maintenance_503_retry_after_http_date(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """A 503 maintenance page with Retry-After as an HTTP-date waits until that date."""
    answer = lambda: web.Response(  # noqa: E731
        status=503,
        text=_MAINTENANCE,
        content_type="text/html",
        headers={"Retry-After": formatdate(time.time() + 120, usegmt=True)},
    )
    error = await _envelope(start_upstream, start_mend, answer)
    assert (error["category"], error["retryable"]) == ("unavailable", True)
    assert abs(int(error["retry_after_ms"]) - 120_000) <= 2000  # type: ignore[call-overload]


async def test_reset_in_the_current_second_is_not_zero(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """An epoch reset that is this very second (truncated by the upstream) is still a wait."""
    answer = lambda: web.Response(  # noqa: E731
        status=429,
        text=_BOOM_429,
        content_type="application/json",
        headers={"X-RateLimit-Reset": str(int(time.time()))},
    )
    error = await _envelope(start_upstream, start_mend, answer)
    assert error["retryable"] is True
    assert int(error["retry_after_ms"]) >= 1000  # type: ignore[call-overload]
