"""The redaction engine: a compiled detector set run over upstream text (docs/contract.md §3).

- ``Redactor.scrub(text)`` -> ``Scrubbed``: text fit for an agent. Stack traces, exception chains,
  paths, SQL, database driver messages, internal hosts and addresses, secrets and framework debug
  pages are cut; a useful sentence around them is kept. The output is short (a few sentences).
- ``Redactor.mask(text)`` -> ``Scrubbed``: text fit for the operator log. Only secrets (``mask``
  detectors) are masked; traces, paths and hosts stay, because the operator needs them to debug.

``Scrubbed.kinds`` holds one short stable label per family found (the ``kind`` label of
``mend_redactions_total``), deduplicated, in the fixed order of ``KINDS``.

How ``scrub`` says less: plain prose (short words, numbers) passes untouched without the full
pass; a JSON or XML error document is reduced to its message; a debug page becomes ``neutral``;
in a trace only the exception's own line may survive; secrets become ``[redacted]``; hosts,
addresses and paths become a neutral phrase ("an internal host"); SQL, driver messages, class
names and exception chains end the sentence at the clause that holds them. When nothing useful
is left, the result is ``neutral`` (pass ``neutral=""`` to let a caller fall back instead).
``scrub`` reads at most ``scan_limit`` characters, since its output is a few sentences from the
front of the text anyway; ``mask`` reads everything, so each of its patterns runs only when a
literal it needs is present.

What each detector is, and the functions that decide for some of them, live in
``rules/redaction/*.yaml`` and ``proxy/policy/redaction/functions.py``; this module only runs them.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from proxy.policy.json_depth import exceeds_depth
from proxy.policy.redaction import functions, markup
from proxy.policy.redaction.compiled import Record
from proxy.policy.redaction.detectors import KINDS
from proxy.policy.redaction.lines import Clauses, Lines, Note
from proxy.policy.redaction.sets import DetectorSet, default_set

NEUTRAL = "The upstream service reported an internal error."
_KIND_ORDER = {kind: i for i, kind in enumerate(KINDS)}

#: Short texts (field names, reasons, messages) are remembered with their result.
CACHED_LENGTH = 256
CACHE_SIZE = 4096
#: The log's masked upstream bodies, remembered whole (an upstream repeats its error bodies):
#: the characters of the bodies and their masked copies kept, at most.
MASKED_CHARS = 1 << 20

_ESCAPES = re.compile(r"\\r\\n|\\n|\\r|\\t")
# Plain prose (short words and numbers, light punctuation) cannot hold a path, host, address,
# class name, key or frame; only words can start the other families. Such text skips the full
# pass, which matters because scrub runs on every string of an envelope.
_PLAIN = re.compile(
    r"\s*+(?:{token}(?:\s++{token})*+)?\s*+".replace(
        "{token}",
        r"\(?(?:[A-Za-z]{1,15}+|\d{1,6}+|[A-Z]{1,20}+(?:_[A-Z]{1,20}+){1,5}+)"
        r"[.,;:!?%)]{0,3}+(?!\S)",
    )
)
_CAMEL = re.compile(r"[a-z][A-Z]")


@dataclass(frozen=True, slots=True)
class Scrubbed:
    text: str
    kinds: tuple[str, ...] = ()


def ordered(kinds: Iterable[str]) -> tuple[str, ...]:
    return tuple(sorted(set(kinds), key=lambda k: _KIND_ORDER.get(k, len(KINDS))))


def _unescape(match: re.Match[str]) -> str:
    return {"\\t": "\t", "\\r": "\n"}.get(match.group(0), "\n")


class _Remembered:
    """The log's masked bodies by body: an upstream repeats its error bodies, and masking a 2 KB
    one took 130-330 k instructions (issue 29) where a look-up hashes it once. Oldest out first;
    the bodies and their masked copies held are ``MASKED_CHARS`` characters at most."""

    def __init__(self) -> None:
        self.entries: dict[str, Scrubbed] = {}
        self.chars = 0

    def get(self, text: str, mask: Callable[[str], Scrubbed]) -> Scrubbed:
        found = self.entries.get(text)
        if found is None:
            found = mask(text)
            self.keep(text, found)
        return found

    def keep(self, text: str, masked: Scrubbed) -> None:
        size = len(text) + len(masked.text)
        if size > MASKED_CHARS:
            return
        while self.chars + size > MASKED_CHARS:
            oldest = next(iter(self.entries))
            self.chars -= len(oldest) + len(self.entries.pop(oldest).text)
        self.entries[text] = masked
        self.chars += size


class Redactor:
    """Runs one compiled detector set (the shipped one by default); shared by every request.

    ``record`` and ``note`` (``mend explain --redact``) are told of every act; a recording
    redactor keeps no cache.
    """

    def __init__(
        self,
        detectors: DetectorSet | None = None,
        *,
        max_length: int = 300,
        neutral: str = NEUTRAL,
        scan_limit: int = 65_536,
        record: Record | None = None,
        note: Note | None = None,
    ) -> None:
        self.detectors = detectors if detectors is not None else default_set()
        self._cache: dict[str, Scrubbed] = {}
        self._masked = _Remembered()
        self._max_length = max_length
        self._neutral = neutral
        self._scan_limit = scan_limit
        self._note = note
        self._record = record
        #: ``scrub`` and ``mask`` answer a text seen before from memory (not when recording)
        self.remembers = record is None and note is None
        #: the kinds ``mask`` detectors report: a value holding one holds a secret
        self.secret_kinds = frozenset(
            d.spec.kind for d in self.detectors.detectors if d.spec.action == "mask"
        )
        self._clauses = Clauses(self.detectors, max_length, record)
        self._lines = Lines(self.detectors, self._clauses, record, note)
        set_ = self.detectors
        self._page_signs = tuple(
            s for d in set_.pages if not d.spec.html_only for s in d.spec.triggers
        )
        self._markup_signs = tuple(
            s for d in set_.pages if d.spec.html_only for s in d.spec.triggers
        )

    def mask(self, text: str) -> Scrubbed:
        """Mask secrets only; everything else (traces, paths, hosts) stays for the operator;
        a body seen before is answered from memory (``_Remembered``)."""
        return self._masked.get(text, self._mask) if self.remembers else self._mask(text)

    def _mask(self, text: str) -> Scrubbed:
        kinds: list[str] = []
        masked = self._clauses.mask(text, "[masked]", kinds)
        for unit in self.detectors.log_replaces:  # an operator's internal names
            masked = unit.pattern.sub(unit.masker("[masked]", kinds, self._record), masked)
        return Scrubbed(masked, ordered(kinds))

    def scrub(self, text: str) -> Scrubbed:
        """Cut everything internal; keep at most a short useful sentence (or a neutral one)."""
        if len(text) > CACHED_LENGTH or not self.remembers:
            return self._scrub(text)
        # errors repeat: the same field names, reasons and messages arrive again and again
        cached = self._cache.get(text)
        if cached is None:
            cached = self._scrub(text)
            if len(self._cache) >= CACHE_SIZE:
                del self._cache[next(iter(self._cache))]  # oldest first: bounded, never grows
            self._cache[text] = cached
        return cached

    def _scrub(self, text: str) -> Scrubbed:
        if not text or self._is_plain(text):
            return Scrubbed(text)
        kinds: list[str] = []
        extracted = self._from_structured(text, kinds)
        if extracted is None:
            body = _ESCAPES.sub(_unescape, self._bounded(text))
        else:
            body = self._bounded(extracted)
        found_markup = markup.MARKUP.search(body) is not None
        html_page = found_markup and markup.HTML.search(body) is not None
        if self._debug_page(body, html_page, kinds):
            self._clauses.mask(body, "", kinds)
            return Scrubbed(self._neutral, ordered(kinds))
        if found_markup:
            message = markup.XML_MESSAGE.search(body) if not markup.HTML.search(body) else None
            body = markup.strip_markup(body)
            if message:
                # an XML error document: its message element is the one thing worth reading;
                # what the rest held still counts for the metric
                self._lines.scrub_text(body, kinds)
                self._told("an XML document: only its message element is read", body)
                body = html.unescape(markup.strip_markup(message.group(2)))
        result = self._lines.scrub_text(body, kinds)
        if not kinds and result == text:
            return Scrubbed(text)
        return Scrubbed(result or self._neutral, ordered(kinds))

    def _is_plain(self, text: str) -> bool:
        if len(text) > self._max_length or _PLAIN.fullmatch(text) is None or _CAMEL.search(text):
            return False
        lowered = functions.ascii_lower(text)
        words = self.detectors.prose_words
        if words is not None and words.search(lowered):
            return False
        return not any(unit.may_match(text, lowered) for unit in self.detectors.in_prose)

    def _bounded(self, text: str) -> str:
        if len(text) <= self._scan_limit:
            return text
        head = text[: self._scan_limit]
        # a secret cut in half would no longer look like one: end at the last complete line
        cut = head.rfind("\n")
        return head[:cut] if cut > 0 else head[: head.rfind(" ") if " " in head else 0]

    def _from_structured(self, text: str, kinds: list[str]) -> str | None:
        """A JSON body: its one message-like string, or ``""`` when it has none."""
        stripped = text.strip()
        if not stripped or stripped[0] not in "{[" or len(stripped) > 32 * self._scan_limit:
            return None
        if exceeds_depth(stripped):  # the stdlib parser recurses: deep text stays text
            return None
        try:
            document = json.loads(stripped)
        except ValueError:
            return None
        message = markup.message_of(document, 0)
        if message is not None and functions.names_programming_error(document):
            # {"error": "KeyError", "message": "'flag'"}: the message is about code
            kinds.append("exception_class")
            self._told(
                "a JSON error naming a programming error: its message is about code", message
            )
            message = ""
        if message is None or message.strip() != stripped:
            # everything but the message is dropped; what it held still counts for the metric
            self._lines.scrub_text(_ESCAPES.sub(_unescape, self._bounded(stripped)), kinds)
            self._told("a JSON document: only its message is read", stripped)
        return "" if message is None else message

    def _debug_page(self, body: str, html_page: bool, kinds: list[str]) -> bool:
        lowered = body.lower()
        sign = functions.is_debug_page(lowered, html_page, self._page_signs, self._markup_signs)
        if sign is None:
            return False
        page = next(d for d in self.detectors.pages if sign in d.spec.triggers)
        kinds.append(page.spec.kind)
        self._told(f"a framework debug page ({page.name}: {sign!r}), replaced whole", body)
        return True

    def _told(self, step: str, text: str) -> None:
        if self._note is not None:
            self._note(step, text)
