"""The envelope step that keeps what only a built-in fallback explained (issue 40).

After a match, an answer whose envelope came from a ``fallback.*`` rule is counted into the
``ShapeBook`` by its shape, with a sample masked as the log line masks bodies. Nothing else is
kept, and nothing unmasked. With ``--workers``, the books reach the supervisor's admin port as
``proxy/runtime/books.py`` says.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from proxy.observation.shapes import kept_headers, shape_of
from proxy.policy.evaluate import Answer
from proxy.policy.exchange import NOT_JSON, Exchange
from proxy.runtime.record import LOGGED_BODY_CHARS

if TYPE_CHECKING:
    from proxy.runtime.books import Books
    from proxy.runtime.flow import Flow

#: the rules that explain an answer no pack knew
FALLBACK_PREFIX = "fallback."


class Unexplained:
    """An envelope step: counts fallback-explained answers into ``book``; the answer as it was."""

    def __init__(self, books: Books) -> None:
        self.books = books
        self.book = books.shapes

    def __call__(self, flow: Flow, exchange: Exchange, answer: Answer) -> Answer:
        rules = [e.match.rule.id for e in answer.evaluations]
        fallback = next((r for r in rules if r.startswith(FALLBACK_PREFIX)), None)
        if fallback is None or exchange.status is None or flow.failure is not None:
            return answer
        is_json = exchange.json is not NOT_JSON
        shape = shape_of(
            exchange.route,
            exchange.status,
            exchange.content_type,
            exchange.json,
            exchange.text,
            is_json=is_json,
        )
        mask = flow.redactor().mask
        limit = self.book.limits.sample_chars
        headers = {k: mask(v).text for k, v in kept_headers(exchange.headers.items()).items()}
        self.book.record(
            shape,
            rule=fallback,
            # the slice the log line masks: the redactor's memory answers the second mask
            sample=mask(exchange.text[:LOGGED_BODY_CHARS]).text[:limit],
            headers=headers,
            method=exchange.method,
            path=mask(exchange.path[:200]).text,
        )
        self.books.changed()
        return answer
