"""Repeats and session patterns, written into a failure's envelope (docs/contract.md §1, §7).

``Review.envelope`` is the proxy's envelope post-processor: it runs for failures only, after the
envelope is built and before it is rendered, with one store call (one Redis round trip). When
the store does not answer in time, the envelope goes out as it was built.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping
from datetime import UTC, datetime

import orjson

from proxy.config.crosscall import SessionSettings
from proxy.policy.crosscall.guard import Guard
from proxy.policy.crosscall.session import Sessions
from proxy.policy.crosscall.store import MAX_PATH_CHARS, Failure, Seen, StateStore, Summary
from proxy.policy.envelope.model import (
    Action,
    Category,
    Envelope,
    RepeatInfo,
    SessionPattern,
    Severity,
    made,
    revised,
)

#: entries of the session summary's ``repeats``, most repeated first
SUMMARY_REPEATS = 50
#: characters of a request method kept (a method is any token, as long as the request line)
MAX_METHOD_CHARS = 32
#: formatted times and session patterns remembered (a repeat's first failure is formatted again
#: on every repeat of it); past this many each table starts again
MEMO_MAX = 1024


def _digest(*parts: str) -> str:
    text = "\x00".join(parts).encode("utf-8", "surrogatepass")
    return hashlib.blake2b(text, digest_size=16).hexdigest()


def body_digest(tee: bytes | None, length: int | None) -> str:
    """The request body's identity: a hash of what the proxy kept of it (a JSON body's first
    64 KiB, ``Call.tee``) with its length; a body it did not keep is known by its length.

    A JSON-RPC request (MCP), or each request of a batch, is hashed without its ``id``: an
    agent resending the same call numbers it anew, and it is the same call."""
    if tee is None:
        return f"len:{length}"
    if b'"jsonrpc"' in tee[:4096]:
        tee = _without_id(tee)
    return f"{hashlib.blake2b(tee, digest_size=16).hexdigest()}:{length}"


def _without_id(tee: bytes) -> bytes:
    try:
        document = orjson.loads(tee)
    except orjson.JSONDecodeError:
        return tee  # cut at the tee's cap, or not JSON: hashed as it is
    if isinstance(document, dict) and "jsonrpc" in document:
        document.pop("id", None)
        return orjson.dumps(document, option=orjson.OPT_SORT_KEYS)
    if isinstance(document, list) and any(isinstance(i, dict) and "jsonrpc" in i for i in document):
        for item in document:  # a batch: each element numbered anew when resent
            if isinstance(item, dict):
                item.pop("id", None)
        return orjson.dumps(document, option=orjson.OPT_SORT_KEYS)
    return tee


_RFC3339: dict[int, str] = {}


def rfc3339(epoch_ms: int) -> str:
    """``epoch_ms`` as ``2026-11-27T15:04:05.123Z``; each instant formatted once (``MEMO_MAX``)."""
    text = _RFC3339.get(epoch_ms)
    if text is None:
        moment = datetime.fromtimestamp(epoch_ms / 1000, tz=UTC)
        text = moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")
        if len(_RFC3339) >= MEMO_MAX:
            _RFC3339.clear()
        _RFC3339[epoch_ms] = text
    return text


class Review:
    def __init__(
        self,
        settings: SessionSettings,
        store: StateStore,
        guard: Guard,
        suggestions: Mapping[Category, str],
    ) -> None:
        self.settings = settings
        self.sessions = Sessions(settings)
        self.store = store
        self.guard = guard
        self.suggestions = suggestions
        self.window_ms = settings.window_s * 1000
        #: ``patterns`` by the session's category counts, which repeat from failure to failure
        self._patterns: dict[tuple[tuple[str, int], ...], tuple[SessionPattern, ...]] = {}

    async def envelope(
        self,
        envelope: Envelope,
        *,
        headers: Mapping[str, str],
        client: str | None,
        method: str,
        route: str,
        path: str,
        body: str,
    ) -> Envelope:
        """The envelope with what this session's earlier failures say about it."""
        session = self.sessions.identify(headers, client)
        now_ms = int(time.time() * 1000)
        method = method[:MAX_METHOD_CHARS]
        request = _digest(session, method, route, path, body)
        due = now_ms + (envelope.retry_after_ms or 0) if envelope.retryable else None
        failure = Failure(
            session=session,
            fingerprint=_digest(request, envelope.code),
            request=request,
            category=envelope.category.value,
            method=method,
            path=path[:MAX_PATH_CHARS],
            code=envelope.code,
            now_ms=now_ms,
            window_ms=self.window_ms,
            retry_due_ms=due,
        )
        seen = await self.guard.run("record", self.store.record(failure))
        if seen is None:
            return envelope
        return self.revise(envelope, seen, now_ms, method, path)

    def revise(
        self, envelope: Envelope, seen: Seen, now_ms: int, method: str, path: str
    ) -> Envelope:
        """``envelope`` with ``repeat``, ``session_patterns`` and, for a loop, advice to stop."""
        update: dict[str, object] = {}
        if seen.count >= 2:
            update["repeat"] = made(
                RepeatInfo,
                {
                    "count": seen.count,
                    "window_s": self.settings.window_s,
                    "first_at": rfc3339(seen.first_ms),
                },
            )
        patterns = self.patterns(seen.categories)
        if patterns:
            update["session_patterns"] = patterns
        request = f"{method} {path[:MAX_PATH_CHARS]}"
        if not envelope.retryable and seen.count >= self.settings.escalate_after:
            stop = (
                f"This exact request ({request}) has failed {seen.count} times with "
                f"{envelope.code}: do not send it again unchanged."
            )
            update["action"] = Action.ESCALATE
            update["severity"] = Severity.FATAL
            update["hint"] = f"{stop} Change it as follows, or tell the human: {envelope.hint}"
            update["steps"] = (stop, envelope.hint, *envelope.steps)
        elif envelope.retryable and seen.previous_due_ms is not None:
            early = seen.previous_due_ms - now_ms
            if early > 0:
                wait = f"This request was retried too early: wait {early:,} ms more, then retry."
                update["hint"] = f"{wait} {envelope.hint}"
                update["steps"] = (wait, *envelope.steps)
        return revised(envelope, update) if update else envelope

    def patterns(self, categories: Mapping[str, int]) -> tuple[SessionPattern, ...]:
        """The categories recurring ``pattern_after`` times or more, most first; remembered by
        the counts (``MEMO_MAX``)."""
        key = tuple(categories.items())
        found = self._patterns.get(key)
        if found is None:
            found = self._find_patterns(categories)
            if len(self._patterns) >= MEMO_MAX:
                self._patterns.clear()
            self._patterns[key] = found
        return found

    def _find_patterns(self, categories: Mapping[str, int]) -> tuple[SessionPattern, ...]:
        found = []
        for name, count in sorted(categories.items(), key=lambda item: (-item[1], item[0])):
            if count < self.settings.pattern_after:
                continue
            try:
                category = Category(name)
            except ValueError:  # a category written by a newer replica: not ours to explain
                continue
            found.append(
                SessionPattern(
                    category=category, count=count, suggestion=self.suggestions[category]
                )
            )
        return tuple(found)

    async def summary(self, headers: Mapping[str, str], client: str | None) -> dict[str, object]:
        """The caller's own session (``GET /_mend/session``); ``available: false`` when the
        store did not answer in time."""
        session = self.sessions.identify(headers, client)
        now_ms = int(time.time() * 1000)
        found: Summary | None = await self.guard.run(
            "summary", self.store.summary(session, now_ms, self.window_ms)
        )
        document: dict[str, object] = {
            "session": session,
            "window_s": self.settings.window_s,
            "available": found is not None,
        }
        if found is None:
            return document
        repeats = sorted(found.repeats, key=lambda r: (-r.count, r.first_ms))[:SUMMARY_REPEATS]
        document["failures_by_category"] = dict(sorted(found.categories.items()))
        document["session_patterns"] = [
            p.model_dump(mode="json") for p in self.patterns(found.categories)
        ]
        document["repeats"] = [
            {
                "method": r.method,
                "path": r.path,
                "code": r.code,
                "count": r.count,
                "first_at": rfc3339(r.first_ms),
            }
            for r in repeats
        ]
        return document
