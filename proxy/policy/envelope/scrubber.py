"""``Scrubber``: the redactor's ``scrub`` for the text of one envelope, its kinds collected."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from proxy.policy.redaction import Redactor, Scrubbed
from proxy.policy.rules.memo import Bounded, Probation

T = TypeVar("T")

#: Documents a memory holds, the characters their keys may hold in all, and the longest one.
_REMEMBERED_MAX = 32
_REMEMBERED_CHARS_MAX = 128 << 10
DOCUMENT_MAX = 16_384


class Scrubber:
    """``scrub``, a ``Callable[[str], str]``: ``run(text).text``, its kinds added to ``kinds``.
    Handed out as the bound method (a call to it is cheaper than to an instance's
    ``__call__``); ``of`` finds the scrubber again.

    ``redactor`` is set when ``run`` is that redactor's own ``scrub`` and it remembers what it
    scrubbed (no recording, no values kept readable): what this scrubber makes of a text then
    depends on the text and the redactor alone, so a value made of upstream text can be
    remembered by the two (``invalid_fields.found``), its kinds with it.
    """

    __slots__ = ("kinds", "redactor", "run")

    def __init__(
        self, run: Callable[[str], Scrubbed], kinds: list[str], redactor: Redactor | None
    ) -> None:
        self.run = run
        self.kinds = kinds
        self.redactor = redactor

    def scrub(self, text: str) -> str:
        scrubbed = self.run(text)
        self.kinds.extend(scrubbed.kinds)
        return scrubbed.text


def of(scrub: Callable[[str], str]) -> Scrubber | None:
    """The ``Scrubber`` whose ``scrub`` ``scrub`` is, else ``None`` (a plain function)."""
    owner = getattr(scrub, "__self__", None)
    return owner if isinstance(owner, Scrubber) else None


class Remembered(Bounded[tuple[object, bytes], tuple[Any, tuple[str, ...]]]):
    """What a rule made of a JSON document, scrubbed (``invalid_fields``, ``upstream_detail``),
    with the redaction kinds scrubbing it reported, by the redactor and the document as
    ``orjson`` writes it (``Exchange.written``). Bounded by entries and characters, the oldest
    dropped first."""

    __slots__ = ("probation",)

    def __init__(self) -> None:
        super().__init__(_REMEMBERED_MAX, _REMEMBERED_CHARS_MAX)
        #: asked only while documents repeat (``proxy/policy/rules/memo.py``)
        self.probation = Probation()


def recalled(
    memory: Remembered,
    scrub: Callable[[str], str],
    about: object,
    document: bytes | None,
    make: Callable[[], T],
    weight: int = 0,
) -> T:
    """``make()``, or what it gave before for ``document`` (and ``about``: what else it reads,
    ``weight`` characters of it) scrubbed by the same remembering redactor, its kinds reported
    again to ``scrub``'s list. ``make`` must be a function of the document, ``about`` and the
    scrub alone, and its value never changed by who gets it."""
    scrubber = of(scrub)
    if scrubber is None or scrubber.redactor is None:
        return make()
    if document is None or len(document) > DOCUMENT_MAX or not memory.probation.worth():
        return make()
    key = ((scrubber.redactor, about), document)
    known = memory.entries.get(key)
    if known is None:
        memory.probation.miss()
        start = len(scrubber.kinds)
        value = make()
        memory.put(key, (value, tuple(scrubber.kinds[start:])), len(document) + weight)
        return value
    memory.probation.hit()
    value, kinds = known[0]
    scrubber.kinds.extend(kinds)
    return value
