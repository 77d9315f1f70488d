"""The envelope step that keeps the last errors agents met, for the admin page (issue 40).

Runs after ``Reply``: what the agent received is the response it made. The upstream's side is
masked as the log line masks bodies; the agent's side is the envelope, already redacted when it
was built. The ring is ``proxy/observation/recent.py``'s.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from aiohttp import web

from proxy.observation.recent import Failure, Side
from proxy.observation.shapes import kept_headers
from proxy.policy.evaluate import Answer
from proxy.policy.exchange import Exchange
from proxy.runtime.record import LOGGED_BODY_CHARS

if TYPE_CHECKING:
    from proxy.runtime.books import Books
    from proxy.runtime.flow import Flow

#: characters of a request's path kept with it
PATH_CHARS = 200


class Recent:
    """An envelope step: the failure, both sides, into the ring; the answer as it was."""

    def __init__(self, books: Books) -> None:
        self.books = books

    def __call__(self, flow: Flow, exchange: Exchange, answer: Answer) -> Answer:
        response, envelope = flow.response, flow.envelope
        if not isinstance(response, web.Response) or envelope is None:
            return answer
        mask = flow.redactor().mask
        limit = self.books.recent.limits.body_chars
        if flow.failure is None and exchange.status is not None:
            headers = {k: mask(v).text for k, v in kept_headers(exchange.headers.items()).items()}
            # the slice the log line masks: the redactor's memory answers the second mask
            body = mask(exchange.text[:LOGGED_BODY_CHARS]).text[:limit]
            upstream = Side(exchange.status, exchange.content_type, headers, body)
        else:  # mend's own failure: the upstream gave no answer
            upstream = Side(None, "", {}, "")
        sent = response.body if isinstance(response.body, bytes) else b""
        agent = Side(
            response.status,
            response.headers.get("Content-Type", ""),
            {str(k): v for k, v in response.headers.items() if k.lower() != "set-cookie"},
            sent[:limit].decode("utf-8", "replace"),
        )
        rule = answer.evaluations[0].match.rule.id if answer.evaluations else ""
        self.books.recent.add(
            Failure(
                at=time.time(),
                request_id=exchange.request_id,
                route=exchange.route,
                method=exchange.method,
                path=mask(exchange.path[:PATH_CHARS]).text,
                code=envelope.code,
                rule=rule,
                upstream=upstream,
                agent=agent,
            )
        )
        self.books.changed()
        return answer
