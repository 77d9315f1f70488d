"""JSON from agents and upstreams is parsed only when it nests no deeper than ``MAX_JSON_DEPTH``.

Everything mend does with a parsed document walks it: rule queries, flattening nested field
errors, scrubbing every string of a value, ``str()`` of a value for a regex, rendering the
envelope, the log line. Those walks recurse, so a document a few hundred levels deep (``orjson``
parses up to 1024) blew the stack deep inside a rewrite. A deeper document is read as text
instead: it still gets its status's envelope, from the rules that read text.

The depth is measured without recursion and without parsing: strings are cut out, the brackets
left become +1 and -1, and their running sum is the depth. Only a body with more opening
brackets than the limit pays for more than two ``bytes.count`` calls.
"""

from __future__ import annotations

from itertools import accumulate
from typing import Any, Final

import orjson

from proxy.policy.exchange import NOT_JSON

MAX_JSON_DEPTH: Final = 64
"""The most containers (objects and arrays) one JSON value may sit inside, the outermost included.

Real error documents nest a handful of levels (RFC 9457 problem details with an ``errors`` array,
GraphQL ``errors[].extensions``, FastAPI ``detail[].ctx``: 3 to 6). Everything that recurses over
a document must stay far from its own limit with the envelope's few levels around the value:
``orjson.dumps`` refuses 255 levels (the rendered envelope, log lines), pydantic's serializer
256, and Python's 1000 frames are shared with aiohttp's stack, some walks taking two frames a
level. ``orjson.loads`` alone would accept 1024. 64 is out of reach of all of them and still
sixteen times what an API sends.
"""

_BRACKETS = b"[]{}"
_NOT_BRACKETS: Final = bytes(b for b in range(256) if b not in _BRACKETS)
#: ``[`` and ``{`` become +1, ``]`` and ``}`` -1, read as signed bytes.
_SIGNS: Final = bytes.maketrans(_BRACKETS, b"\x01\xff\x01\xff")
_LEAF = b"\x01\xff"
#: Rounds of dropping empty containers (``[]``, ``{}``) before summing: each round takes one level
#: off every branch at the speed of ``bytes.replace``, and big flat bodies shrink to almost nothing.
_LEAF_ROUNDS = 2
_CHUNK = 1 << 16


def _outside_strings(data: bytes) -> bytes:
    """``data`` without the contents of its JSON strings, where brackets do not count.

    Escaped backslashes go first, then escaped quotes, so every ``"`` left opens or closes a
    string; an unterminated last string is dropped to the end, as a parser would stop there.
    Linear on any input: no regex, no backtracking.
    """
    if b'"' not in data:
        return data
    unescaped = data.replace(b"\\\\", b"").replace(b'\\"', b"")
    return b"".join(unescaped.split(b'"')[::2])


def _signs(data: bytes, rounds: int) -> bytes:
    signs = _outside_strings(data).translate(_SIGNS, _NOT_BRACKETS)
    for _ in range(rounds):
        signs = signs.replace(_LEAF, b"")
    return signs


def exceeds_depth(data: bytes | str, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether a JSON parser reading ``data`` would go more than ``limit`` containers deep.

    Exact for valid JSON; for anything else an upper bound on how deep a parser gets before it
    fails, so a ``False`` is always safe to parse. Iterative, in C-speed steps: a megabyte of
    ``[`` is decided in milliseconds, and the worst 8 MB body (a million sibling containers
    ``limit`` deep) in about half a second, a quarter of what ``orjson`` takes to build it.
    """
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    if raw.count(b"[") + raw.count(b"{") <= limit:
        return False
    rounds = min(_LEAF_ROUNDS, limit)
    signs = _signs(raw, rounds)
    limit -= rounds  # each round took one level off the deepest branch
    depth = 0
    for start in range(0, len(signs), _CHUNK):
        chunk = signs[start : start + _CHUNK]
        if max(accumulate(memoryview(chunk).cast("b"), initial=depth)) > limit:
            return True
        depth += chunk.count(1) - chunk.count(255)
    return False


def loads(data: bytes | str, limit: int = MAX_JSON_DEPTH) -> Any:
    """The JSON value in ``data``, or ``NOT_JSON`` when it does not parse or nests too deep."""
    if exceeds_depth(data, limit):
        return NOT_JSON
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return NOT_JSON
