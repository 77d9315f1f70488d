"""``redaction:`` in the config file, top level and per route: what an operator adds.

Every key is a list; a route's lists are added to the top-level ones. Patterns are RE2 (linear in
the text, like rule regexes) and compile at load, so a bad one is a ``file:line`` config error.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from proxy.config.re2compile import checked

#: a DNS suffix as an operator writes it: ``corp.acme``, ``.corp.acme`` or ``*.corp.acme``
_SUFFIX = re.compile(
    r"^(?:\*\.|\.)?([A-Za-z0-9_](?:[A-Za-z0-9_-]{0,62})(?:\.[A-Za-z0-9_-]{1,63}){0,10})$"
)
#: an HTTP header name (RFC 9110 token)
_HEADER = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,100}$")


def _pattern(pattern: str) -> str:
    if not pattern:
        raise ValueError("an empty pattern would match everywhere")
    if checked(pattern).search("") is not None:
        raise ValueError(f"{pattern!r} matches the empty string")
    return pattern


def _suffix(suffix: str) -> str:
    match = _SUFFIX.match(suffix.strip())
    if match is None:
        raise ValueError(f"{suffix!r} is not a DNS suffix (write corp.acme or *.corp.acme)")
    return match.group(1).lower()


def _header(name: str) -> str:
    if not _HEADER.match(name):
        raise ValueError(f"{name!r} is not a header name")
    return name.lower()


def _word(word: str) -> str:
    if not word.strip() or len(word) > 200:
        raise ValueError(f"{word!r}: a word or id of 1 to 200 characters")
    return word.strip()


Pattern = Annotated[str, AfterValidator(_pattern)]
Suffix = Annotated[str, AfterValidator(_suffix)]
Header = Annotated[str, AfterValidator(_header)]
Word = Annotated[str, AfterValidator(_word)]


class RedactionSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    #: RE2 patterns of secrets (a company token format): masked in envelopes, headers and the
    #: log; a pattern with a capturing group masks only its first group
    secrets: tuple[Pattern, ...] = ()
    #: DNS suffixes whose hosts are internal (``corp.acme``, ``*.int.acme.io``)
    internal_domains: tuple[Suffix, ...] = ()
    #: RE2 patterns of internal host names (``db-[0-9]+``): replaced by "an internal host"
    internal_hosts: tuple[Pattern, ...] = ()
    #: header names whose echoed value (``X-Session: ...`` in a body or log) is masked
    mask_headers: tuple[Header, ...] = ()
    #: words or ids never shown (matched whole, any case): masked like secrets
    never_show: tuple[Word, ...] = ()
    #: RE2 patterns of public ids an agent must see (order numbers): never masked or replaced
    allow: tuple[Pattern, ...] = ()
    #: detector files or directories of your own (RE2 patterns), run with the shipped ones
    detectors: tuple[Path, ...] = Field(default=())

    @property
    def empty(self) -> bool:
        return not any(getattr(self, name) for name in type(self).model_fields)

    def merged(self, other: RedactionSettings | None) -> RedactionSettings:
        """These additions and ``other``'s (a route's), each list in order without repeats."""
        if other is None or other.empty:
            return self
        if self.empty:
            return other
        return RedactionSettings.model_validate(
            {
                name: tuple(dict.fromkeys((*getattr(self, name), *getattr(other, name))))
                for name in type(self).model_fields
            }
        )
