"""The state store shared by replicas: Redis (``state: redis://host:port/db``).

Each operation is one round trip: a Lua script run server-side (redis-py's ``Script`` sends it
by SHA, and the text once after a restart), or one pipelined read. Every key has a TTL, so a
session or route that goes quiet leaves nothing behind. Keys (``{...}`` is a Redis Cluster hash
tag, keeping one session's keys on one node):

- ``mend:s:{S}:r``: hash, fingerprint -> ``{c, f, d, m, k, p}`` (count, first ms, retry due,
  method, code, path) of the session's remembered failures; TTL the window
- ``mend:s:{S}:q:<category>``: sorted set of failing request digests, scored by time; TTL the window
- ``mend:s:{S}:c``: hash, category -> ``{n, t}`` (distinct requests, last ms); TTL the window
- ``mend:c:{route}``: hash ``n`` (consecutive failures), ``until`` (open until, ms); a day
- ``mend:c:{route}:p``: the half-open probe token; TTL the open time
- ``mend:b:<replica>``: a replica's operator books (the admin page's shapes and failures,
  masked), JSON; TTL a minute, written every few seconds while the replica lives

redis-py's errors are translated here, once, into ``StateError``.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Awaitable
from typing import Any, TypeVar

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from proxy.policy.crosscall.guard import StateError
from proxy.policy.crosscall.store import (
    MAX_REPEATS_PER_SESSION,
    MAX_REPLICA_BOOKS,
    MAX_REQUESTS_PER_CATEGORY,
    Failure,
    Repeat,
    Seen,
    Summary,
)

T = TypeVar("T")

_RECORD = """
local now = tonumber(ARGV[3])
local window = tonumber(ARGV[4])
local count, first, prev = 0, now, false
local raw = redis.call('HGET', KEYS[1], ARGV[1])
if raw then
  local ok, entry = pcall(cjson.decode, raw)
  if ok and type(entry) == 'table' and tonumber(entry.f) and tonumber(entry.f) >= now - window then
    count, first, prev = tonumber(entry.c) or 0, tonumber(entry.f), entry.d
  end
elseif redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[10]) then
  redis.call('DEL', KEYS[1])
end
count = count + 1
local due = false
if ARGV[5] ~= '' then due = tonumber(ARGV[5]) end
redis.call('HSET', KEYS[1], ARGV[1],
  cjson.encode({c = count, f = first, d = due, m = ARGV[6], k = ARGV[7], p = ARGV[8]}))
redis.call('PEXPIRE', KEYS[1], window)
redis.call('ZADD', KEYS[2], now, ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - window - 1)
local n = redis.call('ZCARD', KEYS[2])
local cap = tonumber(ARGV[11])
if n > cap then
  redis.call('ZREMRANGEBYRANK', KEYS[2], 0, n - cap - 1)
  n = cap
end
redis.call('PEXPIRE', KEYS[2], window)
redis.call('HSET', KEYS[3], ARGV[9], cjson.encode({n = n, t = now}))
redis.call('PEXPIRE', KEYS[3], window)
local prev_out = ''
if type(prev) == 'number' then prev_out = tostring(prev) end
return {count, tostring(first), prev_out, redis.call('HGETALL', KEYS[3])}
"""

_CIRCUIT_FAILURE = """
local now = tonumber(ARGV[3])
local open = tonumber(redis.call('HGET', KEYS[1], 'until') or '0')
if open > 0 and open <= now then
  open = now + tonumber(ARGV[2])
  redis.call('HSET', KEYS[1], 'n', 0, 'until', open)
  redis.call('DEL', KEYS[2])
elseif open == 0 then
  local n = redis.call('HINCRBY', KEYS[1], 'n', 1)
  if n >= tonumber(ARGV[1]) then
    open = now + tonumber(ARGV[2])
    redis.call('HSET', KEYS[1], 'n', 0, 'until', open)
    redis.call('DEL', KEYS[2])
  end
end
redis.call('PEXPIRE', KEYS[1], 86400000)
return tostring(open)
"""

#: how long a route's consecutive-failure count is kept without a new failure
_CIRCUIT_TTL_MS = 86_400_000


def _session_keys(session: str) -> tuple[str, str]:
    return f"mend:s:{{{session}}}:r", f"mend:s:{{{session}}}:c"


def _categories(pairs: Any, oldest_ms: int) -> dict[str, int]:
    """``{category: n}`` from the ``:c`` hash (a flat list or a dict), dropping stale ones."""
    items = pairs.items() if isinstance(pairs, dict) else zip(pairs[::2], pairs[1::2], strict=True)
    found: dict[str, int] = {}
    for name, value in items:
        try:
            data = json.loads(value)
            if int(data["t"]) >= oldest_ms:
                found[_text(name)] = int(data["n"])
        except (ValueError, KeyError, TypeError):
            continue
    return found


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _bytes(value: bytes | str) -> bytes:
    return value if isinstance(value, bytes) else value.encode()


class RedisStore:
    def __init__(self, url: str, *, timeout_ms: int) -> None:
        timeout_s = max(timeout_ms / 1000, 0.05)
        # a command is bounded by the guard's timeout; these bound the socket under it, and
        # redis-py's own retries are off: a failure is answered without the store, not retried
        self.client = aioredis.Redis.from_url(
            url,
            socket_connect_timeout=timeout_s,
            socket_timeout=max(timeout_s * 4, 1.0),
            max_connections=256,
            retry_on_timeout=False,
            health_check_interval=30,
        )
        self._record = self.client.register_script(_RECORD)
        self._circuit_failure = self.client.register_script(_CIRCUIT_FAILURE)

    @staticmethod
    async def _call(work: Awaitable[T]) -> T:
        try:
            return await work
        except (RedisError, OSError) as exc:
            raise StateError(f"redis: {type(exc).__name__}: {exc}") from exc

    async def record(self, failure: Failure) -> Seen:
        repeats, categories = _session_keys(failure.session)
        requests = f"mend:s:{{{failure.session}}}:q:{failure.category}"
        due = "" if failure.retry_due_ms is None else str(failure.retry_due_ms)
        args: list[str | int] = [
            failure.fingerprint,
            failure.request,
            failure.now_ms,
            failure.window_ms,
            due,
            failure.method,
            failure.code,
            failure.path,
            failure.category,
            MAX_REPEATS_PER_SESSION,
            MAX_REQUESTS_PER_CATEGORY,
        ]
        reply = await self._call(self._record(keys=[repeats, requests, categories], args=args))
        try:
            count, first, previous, pairs = reply
            prev = _text(previous)
            return Seen(
                int(count),
                int(_text(first)),
                int(prev) if prev else None,
                _categories(pairs, failure.now_ms - failure.window_ms),
            )
        except (ValueError, TypeError) as exc:
            raise StateError(f"redis: unexpected reply {str(reply)[:100]}") from exc

    async def summary(self, session: str, now_ms: int, window_ms: int) -> Summary:
        repeats_key, categories_key = _session_keys(session)
        async with self.client.pipeline(transaction=False) as pipe:
            pipe.hgetall(repeats_key)
            pipe.hgetall(categories_key)
            entries, pairs = await self._call(pipe.execute())
        repeats = []
        for value in list(entries.values())[:MAX_REPEATS_PER_SESSION]:
            try:
                data = json.loads(value)
                if int(data["f"]) < now_ms - window_ms:
                    continue
                repeats.append(
                    Repeat(
                        str(data["m"]),
                        str(data["p"]),
                        str(data["k"]),
                        int(data["c"]),
                        int(data["f"]),
                    )
                )
            except (ValueError, KeyError, TypeError):
                continue
        return Summary(_categories(pairs, now_ms - window_ms), repeats)

    async def circuit_failure(self, route: str, threshold: int, open_ms: int, now_ms: int) -> int:
        keys = [f"mend:c:{{{route}}}", f"mend:c:{{{route}}}:p"]
        reply = await self._call(
            self._circuit_failure(keys=keys, args=[threshold, open_ms, now_ms])
        )
        return int(_text(reply))

    async def circuit_success(self, route: str) -> bool:
        await self._call(self.client.delete(f"mend:c:{{{route}}}", f"mend:c:{{{route}}}:p"))
        return True

    async def circuit_state(self, route: str) -> int:
        value = await self._call(self.client.hget(f"mend:c:{{{route}}}", "until"))
        return int(_text(value)) if value else 0

    async def circuit_probe(self, route: str, ttl_ms: int, now_ms: int) -> bool:
        taken = await self._call(
            self.client.set(f"mend:c:{{{route}}}:p", now_ms, nx=True, px=ttl_ms)
        )
        return bool(taken)

    async def put_books(self, replica: str, books: bytes, ttl_ms: int) -> None:
        await self._call(self.client.set(f"mend:b:{replica}", books, px=ttl_ms))

    async def books(self) -> dict[str, bytes]:
        async def read() -> dict[str, bytes]:
            keys = []
            async for key in self.client.scan_iter(match="mend:b:*", count=100):
                keys.append(key)
                if len(keys) >= MAX_REPLICA_BOOKS:
                    break
            values = await self.client.mget(keys) if keys else []
            prefix = len("mend:b:")
            pairs = zip(keys, values, strict=True)
            return {_text(k)[prefix:]: _bytes(v) for k, v in pairs if v}

        return await self._call(read())

    async def close(self) -> None:
        with contextlib.suppress(RedisError, OSError):
            await self.client.aclose()
