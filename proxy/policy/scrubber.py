"""``Scrubber``: the redactor's ``scrub`` for the text of one envelope, its kinds collected."""

from __future__ import annotations

from collections.abc import Callable

from proxy.policy.redaction import Redactor, Scrubbed


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
