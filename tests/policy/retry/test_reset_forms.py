"""The reset forms real rate limiters and maintenance pages send, through a real mend.

Each upstream is a real aiohttp server stating a reset relative to the real clock; the agent's
``retry_after_ms`` must be that wait within 2 s (never 0 for a stated future reset). The bodies
are the ones these upstreams document: hapi-rate-limit answers with Boom's
``tooManyRequests('Rate limit exceeded')``; GitHub's primary rate limit body is the one its REST
documentation shows.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from datetime import UTC, datetime
from email.utils import formatdate
from typing import NamedTuple

import pytest
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


class Documented(NamedTuple):
    """An answer as its upstream documents it, and what mend must make of it."""

    status: int
    body: str
    media_type: str
    #: its headers, made as it answers (a reset is relative to that moment)
    headers: Callable[[], dict[str, str]]
    category: str
    #: the wait the headers state, in ms
    wait_ms: int


_DOCUMENTED = [
    pytest.param(
        Documented(
            429,
            _BOOM_429,
            "application/json",
            lambda: {
                "X-RateLimit-UserLimit": "5",
                "X-RateLimit-UserRemaining": "0",
                "X-RateLimit-UserReset": str(round(time.time() * 1000) + 42_000),
            },
            "rate_limit",
            42_000,
        ),
        id="hapi-user-reset-epoch-ms",  # hapi-rate-limit's X-RateLimit-UserReset, epoch ms
    ),
    pytest.param(
        Documented(
            403,
            _GITHUB_BODY,
            "application/json",
            lambda: {
                "x-ratelimit-limit": "60",
                "x-ratelimit-remaining": "0",
                "x-ratelimit-used": "60",
                "x-ratelimit-resource": "core",
                "x-ratelimit-reset": str(int(time.time()) + 1800),
            },
            "rate_limit",
            1_800_000,
        ),
        id="github-403-reset-epoch-s",  # GitHub's 403 whose body says rate limit
    ),
    pytest.param(
        Documented(
            403,
            _GITHUB_BODY,
            "application/json",
            lambda: {"x-ratelimit-reset": str(int(time.time()) + 600)},
            "rate_limit",
            600_000,
        ),
        id="github-403-reset-alone",  # a proxy dropped the others: the body says rate limit
    ),
    pytest.param(
        Documented(
            503,
            _MAINTENANCE,
            "text/html",
            lambda: {"Retry-After": formatdate(time.time() + 120, usegmt=True)},
            "unavailable",
            120_000,
        ),
        id="maintenance-503-http-date",  # Retry-After as an HTTP-date
    ),
]


@pytest.mark.parametrize("case", _DOCUMENTED)
async def test_documented_answers_state_their_wait(
    start_upstream: StartUpstream, start_mend: StartMend, case: Documented
) -> None:
    """An answer as its upstream documents it (hapi, GitHub, a maintenance page) is retryable
    in its category, and waits until the reset it states, within 2 s."""
    answer = lambda: web.Response(  # noqa: E731
        status=case.status, text=case.body, content_type=case.media_type, headers=case.headers()
    )
    error = await _envelope(start_upstream, start_mend, answer)
    assert (error["category"], error["retryable"]) == (case.category, True)
    assert abs(int(error["retry_after_ms"]) - case.wait_ms) <= 2000  # type: ignore[call-overload]


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


def _limited(
    headers: Callable[[], dict[str, str]], status: int = 429
) -> Callable[[], web.Response]:
    return lambda: web.Response(
        status=status, text=_BOOM_429, content_type="application/json", headers=headers()
    )


#: (name, the upstream's rate-limit headers as it answers, the wait they state in ms)
_FORMS: list[tuple[str, Callable[[], dict[str, str]], int]] = [
    (
        "ietf-draft-08+",
        lambda: {"RateLimit": '"default";r=0;t=30', "RateLimit-Policy": '"default";q=100;w=60'},
        30_000,
    ),
    (
        "ietf-draft-08+-two-policies",
        lambda: {
            "RateLimit": '"burst";r=0;t=5, "daily";r=4000;t=80000',
            "RateLimit-Policy": '"burst";q=10;w=10, "daily";q=5000;w=86400',
        },
        5_000,
    ),
    (
        "ietf-draft-08+-window-only",
        lambda: {"RateLimit": '"m";r=0', "RateLimit-Policy": '"m";q=5;w=60'},
        60_000,
    ),
    (
        "ietf-draft-07",
        lambda: {"RateLimit": "limit=100, remaining=0, reset=30", "RateLimit-Policy": "100;w=60"},
        30_000,
    ),
    (
        "ietf-draft-06",
        lambda: {"RateLimit-Limit": "100", "RateLimit-Remaining": "0", "RateLimit-Reset": "17"},
        17_000,
    ),
    ("x-ratelimit-reset-delta", lambda: {"X-RateLimit-Reset": "25"}, 25_000),
    (
        "x-ratelimit-reset-epoch-s",
        lambda: {"X-RateLimit-Reset": str(int(time.time()) + 90)},
        90_000,
    ),
    (
        "x-ratelimit-reset-epoch-ms",
        lambda: {"X-RateLimit-Reset": str(round(time.time() * 1000) + 40_000)},
        40_000,
    ),
    ("retry-after-seconds", lambda: {"Retry-After": "12"}, 12_000),
    (
        "retry-after-http-date",
        lambda: {"Retry-After": formatdate(time.time() + 75, usegmt=True)},
        75_000,
    ),
]


@pytest.mark.parametrize(("form", "headers", "wait_ms"), _FORMS, ids=[f[0] for f in _FORMS])
async def test_every_rate_limit_form_states_the_wait(
    start_upstream: StartUpstream,
    start_mend: StartMend,
    form: str,
    headers: Callable[[], dict[str, str]],
    wait_ms: int,
) -> None:
    """A 429 in each rate-limit form: retry_after_ms is the stated wait, Retry-After its ceiling."""

    async def handler(_: web.Request) -> web.Response:
        return _limited(headers)()

    mend = await start_mend(await start_upstream({"/api/x": handler}))
    response = await mend.client.post("/api/x", data=b"{}")
    error = (await response.json())["error"]
    assert (error["retryable"], error["action"]) == (True, "retry"), form
    assert abs(error["retry_after_ms"] - wait_ms) <= 2000, form
    assert response.headers["Retry-After"] == str(math.ceil(error["retry_after_ms"] / 1000))
    assert "applied" not in error  # the upstream answered: it did not process the request


def _iso(seconds_from_now: float) -> str:
    return datetime.fromtimestamp(time.time() + seconds_from_now, UTC).isoformat()


#: (name, status, content type, the body as the upstream answers, the wait it states in ms)
_BODIES: list[tuple[str, int, str, Callable[[], str], int]] = [
    (
        "json-retry-after-ms",
        429,
        "application/json",
        lambda: '{"error": "Too many requests", "retry_after_ms": 2500}',
        2_500,
    ),
    (
        "json-reset-at-iso",
        429,
        "application/json",
        lambda: json.dumps({"message": "Too many requests", "reset_at": _iso(45)}),
        45_000,
    ),
    (
        "json-error-reset-epoch-ms",
        429,
        "application/json",
        lambda: json.dumps(
            {"error": {"message": "slow down", "resetAt": round(time.time() * 1000) + 30_000}}
        ),
        30_000,
    ),
    (
        "text-minutes",
        429,
        "text/plain",
        lambda: "Too many requests. Please try again in 2 minutes.",
        120_000,
    ),
    (
        "text-go-duration",
        429,
        "application/json",
        lambda: json.dumps(
            {"error": {"message": "Rate limit reached for requests. Please try again in 6m0s."}}
        ),
        360_000,
    ),
    ("text-503", 503, "text/plain", lambda: "Overloaded; retry after 90 seconds.", 90_000),
]


@pytest.mark.parametrize(
    ("form", "status", "content_type", "body", "wait_ms"), _BODIES, ids=[b[0] for b in _BODIES]
)
async def test_every_body_stated_reset_gives_the_wait(
    start_upstream: StartUpstream,
    start_mend: StartMend,
    form: str,
    status: int,
    content_type: str,
    body: Callable[[], str],
    wait_ms: int,
) -> None:
    """An error body that says when (JSON member or sentence), no header: that wait, whatever
    rule matched, and Retry-After its ceiling."""

    async def handler(_: web.Request) -> web.Response:
        return web.Response(status=status, text=body(), content_type=content_type)

    mend = await start_mend(await start_upstream({"/api/x": handler}))
    response = await mend.client.get("/api/x")
    error = (await response.json())["error"]
    assert error["retryable"] is True, form
    assert abs(error["retry_after_ms"] - wait_ms) <= 2000, (form, error["rule"])
    assert response.headers["Retry-After"] == str(math.ceil(error["retry_after_ms"] / 1000))
