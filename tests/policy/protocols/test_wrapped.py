"""The HTTP answer a tool's failure reports (``proxy/policy/protocols/wrapped.py``), in the words
of the wrappers that write them: FastMCP's OpenAPI tools, requests, httpx, Go clients, axios,
hand-written servers, ``structuredContent`` and an API's own error document."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.policy.exchange import NOT_JSON
from proxy.policy.protocols.wrapped import SCANNED, reported

FASTAPI_422 = {"detail": [{"type": "missing", "loc": ["body", "title"], "msg": "Field required"}]}


@pytest.mark.parametrize(
    ("text", "status", "path"),
    [
        # fastmcp 4.2 server/providers/openapi/components.py, then its tool-error prefix
        (
            "Error calling tool 'create': HTTP error 422: Unprocessable Entity - "
            + json.dumps(FASTAPI_422),
            422,
            None,
        ),
        (
            "422 Client Error: Unprocessable Entity for url: https://api.internal:8080/orders?x=1",
            422,
            "/orders?x=1",
        ),
        (
            "Client error '404 Not Found' for url 'https://api.example.com/v1/items/9'\n"
            "For more information check: https://developer.mozilla.org",
            404,
            "/v1/items/9",
        ),
        (
            "failed to get issue: GET https://api.github.com/repos/o/r/issues/1: 404 Not Found []",
            404,
            "/repos/o/r/issues/1",
        ),
        ("Request failed with status code 503", 503, None),
        ("Backend answered 429 Too Many Requests. Retry-After: 7", 429, None),
        ("Error: HTTP/1.1 503 Service Unavailable", 503, None),
        ('status_code=503 body={"error": "maintenance"}', 503, None),
        ("The API returned 404 not found", 404, None),
    ],
)
def test_a_wrappers_words_give_the_status_and_the_path_it_called(
    text: str, status: int, path: str | None
) -> None:
    """Each wrapper's wording gives the status, and the path (never the host) when it says it."""
    found = reported(text)
    assert found is not None
    assert (found.status, found.path) == (status, path)


@pytest.mark.parametrize(
    "text",
    [
        "Search returned 500 results",
        "order o_77 cannot be cancelled: it has already shipped",
        "line 422: syntax error",
        "Found 404 matching documents",
        "HTTP error 200: OK",
        "",
    ],
)
def test_a_number_that_is_no_error_status_reports_nothing(text: str) -> None:
    """A count, a line number or a success is no reported error."""
    assert reported(text) is None


def test_the_json_body_after_the_status_is_the_document() -> None:
    """FastMCP's JSON body is read as the answer's document, the words around it dropped."""
    found = reported(f"HTTP error 422: Unprocessable Entity - {json.dumps(FASTAPI_422)}")
    assert found is not None
    assert found.document == FASTAPI_422
    assert found.content_type == "application/json"
    assert found.quotes


def test_a_body_mark_introduces_the_body() -> None:
    """``Body: ...`` (a hand-written server) is where the body starts."""
    found = reported("Backend answered 404 Not Found. Body: no such order")
    assert found is not None
    assert (found.text, found.document) == ("no such order", NOT_JSON)


def test_words_that_quote_only_a_status_are_the_body_and_quote_nothing() -> None:
    """With no body quoted, the words themselves are the body, and the answer is marked as
    quoting nothing (a rule on the words is worth more than the status's fallback)."""
    found = reported("Request failed with status code 503")
    assert found is not None
    assert found.text == "Request failed with status code 503"
    assert not found.quotes


def test_go_githubs_empty_error_list_quotes_nothing() -> None:
    """go-github's trailing ``[]`` (no field errors) is no body."""
    found = reported("GET https://api.github.com/repos/o/r: 409 README.md does not match []")
    assert found is not None
    assert not found.quotes


@pytest.mark.parametrize(
    ("text", "headers"),
    [
        ("Backend answered 429 Too Many Requests. Retry-After: 7", {"retry-after": "7"}),
        ("HTTP 429: slow down; retry-after=12", {"retry-after": "12"}),
        (
            'HTTP 429 headers: {"Retry-After": "Wed, 21 Oct 2026 07:28:00 GMT", '
            '"X-RateLimit-Reset": "1790000000"}',
            {"retry-after": "Wed, 21 Oct 2026 07:28:00 GMT", "x-ratelimit-reset": "1790000000"},
        ),
        (
            "HTTP 401. WWW-Authenticate: Bearer error=invalid_token",
            {"www-authenticate": "Bearer error=invalid_token"},
        ),
        ("HTTP 503 X-Secret-Token: abc", {}),
    ],
)
def test_only_headers_a_rule_can_use_are_read_back(text: str, headers: dict[str, str]) -> None:
    """Waits, rate limits, a challenge and the media type are read back; no other header."""
    found = reported(text)
    assert found is not None
    assert dict(found.headers) == headers


def test_structured_content_with_a_status_is_the_answer() -> None:
    """``structuredContent`` holding a status, headers and a body is the answer itself."""
    structured = {"status_code": 429, "headers": {"Retry-After": "7"}, "body": {"error": "slow"}}
    found = reported("rate limited", structured)
    assert found is not None
    assert (found.status, dict(found.headers), found.document) == (
        429,
        {"retry-after": "7"},
        {"error": "slow"},
    )


def test_an_apis_own_error_document_as_the_text_is_its_answer() -> None:
    """A tool whose text is an RFC 9457 document: the document with its status."""
    problem = {"type": "about:blank", "title": "Not Found", "status": 404, "detail": "no order 9"}
    found = reported(json.dumps(problem))
    assert found is not None
    assert (found.status, found.document) == (404, problem)


def test_a_json_text_without_a_status_reports_nothing() -> None:
    """GitHub's ``{"message": "Not Found"}`` alone states no status: the words' rules read it."""
    assert (
        reported('{"message": "Not Found", "documentation_url": "https://docs.github.com"}') is None
    )


def test_a_status_past_the_scanned_prefix_is_not_read() -> None:
    """Only the first ``SCANNED`` characters are searched (a hostile tool's text is long)."""
    assert reported("x" * SCANNED + " HTTP error 503") is None


@given(
    st.text(max_size=400),
    st.one_of(
        st.none(),
        st.dictionaries(st.text(max_size=8), st.integers() | st.text(max_size=8), max_size=4),
    ),
)
def test_any_text_reports_nothing_or_an_error_status(text: str, structured: object) -> None:
    """Whatever a tool writes, ``reported`` answers: nothing, or a 4xx/5xx status."""
    found = reported(text, structured)
    assert found is None or 400 <= found.status <= 599


@pytest.mark.parametrize(
    "text",
    [
        "Error executing tool search: Backend answered 429 Too Many Requests",
        "Error calling tool 'search': Backend answered 429 Too Many Requests",
    ],
)
def test_the_sdks_prefix_is_not_the_apis_words(text: str) -> None:
    """The words that stand for the body leave out the SDK's "Error executing tool" prefix."""
    found = reported(text)
    assert found is not None
    assert found.text == "Backend answered 429 Too Many Requests"
