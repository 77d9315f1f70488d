"""The model's own input stays readable: values it sent in a tool call's arguments survive
``scrub`` (docs/contract.md §6), secrets excepted.

A tool's error often quotes what the model asked for: the URL ``fetch`` could not read, the path
``git_status`` could not open. Redaction would call them an internal service or path, which the
model cannot act on, and which hides nothing from it. ``keeping`` wraps a scrub so that each such
value is set aside before the detectors run (replaced by a plain placeholder word no detector
reads) and put back after; a value in which the detectors find a secret (a kind of theirs that
masks) is not set aside, so it is masked as ever. Text the model did not send is redacted as before.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from proxy.policy.redaction.engine import Redactor, Scrubbed

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


def _swap(text: str, olds: Sequence[str], news: Sequence[str]) -> tuple[str, bool]:
    """``text`` with every occurrence of ``olds[i]`` replaced by ``news[i]`` in one pass from the
    left (the earliest match first, the longest of those at one place), so that nothing put in
    is read again; and whether anything was. Each old string is searched for again only once
    the pass has gone past its last match: linear in the text for each of them."""
    nexts = [text.find(old) if old else -1 for old in olds]
    out: list[str] = []
    pos = 0
    while True:
        best = -1
        for index in range(len(olds)):
            if 0 <= nexts[index] < pos:
                nexts[index] = text.find(olds[index], pos)
            at = nexts[index]
            if at < 0:
                continue
            if best < 0 or (at, -len(olds[index])) < (nexts[best], -len(olds[best])):
                best = index
        if best < 0:
            break
        at = nexts[best]
        out.append(text[pos:at])
        out.append(news[best])
        pos = at + len(olds[best])
    if not out:
        return text, False
    out.append(text[pos:])
    return "".join(out), True


def keeping(scrub: Callable[[str], Scrubbed], values: Sequence[str]) -> Callable[[str], Scrubbed]:
    """``scrub`` with ``values`` kept as they are wherever they appear."""
    if not values:
        return scrub
    placeholders = [_placeholder(index) for index in range(len(values))]

    def scrub_keeping(text: str) -> Scrubbed:
        aside, found = _swap(text, values, placeholders)
        if not found:
            return scrub(text)
        scrubbed = scrub(aside)
        back, _ = _swap(scrubbed.text, placeholders, values)
        return Scrubbed(back, scrubbed.kinds)

    return scrub_keeping
