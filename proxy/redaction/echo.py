"""The model's own input stays readable: values it sent in a tool call's arguments survive
``scrub`` (CONTRACT §6), secrets excepted.

A tool's error often quotes what the model asked for: the URL ``fetch`` could not read, the path
``git_status`` could not open. Redaction would call them an internal service or path, which the
model cannot act on, and which hides nothing from it. ``keeping`` wraps a scrub so that each such
value is set aside before the detectors run (replaced by a plain placeholder word no detector
reads) and put back after; a value in which the detectors find a secret (a kind of theirs that
masks) is not set aside, so it is masked as ever. Text the model did not send is redacted as before.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from proxy.redaction.engine import Redactor, Scrubbed

#: At most this many values are kept per envelope (the longest first).
MAX_VALUES = 16
#: Placeholders: plain letters, so the engine's prose check lets them through untouched.
_STEM = "Mendkeptvalue"


def _placeholder(index: int) -> str:
    return _STEM + chr(ord("a") + index) + "x"


def kept_values(redactor: Redactor, values: Sequence[str]) -> tuple[str, ...]:
    """The values to keep readable: those in which the redactor finds no secret (no kind a
    ``mask`` detector reports; ``scrub`` remembers short texts, so a value costs one look-up
    after its first time)."""
    secret = redactor.secret_kinds
    kept = [v for v in values[:MAX_VALUES] if secret.isdisjoint(redactor.scrub(v).kinds)]
    return tuple(kept)


def keeping(scrub: Callable[[str], Scrubbed], values: Sequence[str]) -> Callable[[str], Scrubbed]:
    """``scrub`` with ``values`` (longest first) kept as they are wherever they appear."""
    if not values:
        return scrub

    def scrub_keeping(text: str) -> Scrubbed:
        used: list[tuple[str, str]] = []
        for index, value in enumerate(values):
            if value in text:
                placeholder = _placeholder(index)
                text = text.replace(value, placeholder)
                used.append((placeholder, value))
        if not used:
            return scrub(text)
        scrubbed = scrub(text)
        out = scrubbed.text
        for placeholder, value in used:
            out = out.replace(placeholder, value)
        return Scrubbed(out, scrubbed.kinds)

    return scrub_keeping
