"""An operator's ``redaction:`` additions as detectors, run with the shipped set.

- ``secrets``: one ``mask`` detector per pattern (kind ``secret``; its first group, if it has
  one), before the shipped ones, so an explanation names the operator's own format.
- ``never_show``: one ``mask`` detector (kind ``never_show``) for all the words, matched whole in
  any case.
- ``mask_headers``: one ``mask`` detector for ``Name: value`` / ``Name=value`` echoes of those
  headers (the value, as the shipped header-echo detector masks Authorization).
- ``internal_domains``: one ``replace`` detector shaped like the shipped ``internal_domain``
  (names under those suffixes become "an internal host", and a URL to one "an internal
  service"), run right before it (whose shorter suffixes would otherwise take part of a name:
  ``.corp`` of ``db.corp.acme``).
- ``internal_hosts``: one ``replace`` detector per RE2 pattern, after the domains.

Everything an operator adds is hidden in the operator's log too: internal domains and hosts
become ``[masked]`` there (``log: true``), where the shipped host detectors leave the log alone.
- ``allow``: not detectors; ``functions.Context.allow`` (no detector masks what it matches).
- ``detectors``: the operator's own detector files (RE2 only).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from proxy.config.re2compile import checked
from proxy.config.redaction import RedactionSettings
from proxy.config.sourcefile import MAX_FILE_BYTES
from proxy.policy.redaction.detectors import DetectorSpec, LoadedDetector, load_detector_files
from proxy.policy.regex import escape

HOST_WORD = "an internal host"
#: the shipped detector that internal domains and hosts of the operator run before
DOMAIN_ANCHOR = "internal_domain"


def _word(word: str) -> str:
    """RE2 for ``word`` matched whole: a boundary where it starts or ends with a word char."""
    start = r"\b" if re.match(r"\w", word[0]) else ""
    end = r"\b" if re.match(r"\w", word[-1]) else ""
    return f"{start}{escape(word)}{end}"


def _config(spec: DetectorSpec, key: str) -> LoadedDetector:
    return LoadedDetector(spec, f"config:redaction.{key}", "config", "config")


def operator_detectors(
    additions: RedactionSettings, known: Iterable[str] = (), *, max_bytes: int = MAX_FILE_BYTES
) -> list[LoadedDetector]:
    """The detectors ``additions`` make, then those of its detector files (``RuleError``)."""
    out: list[LoadedDetector] = []
    anchor = DOMAIN_ANCHOR if DOMAIN_ANCHOR in set(known) else None
    for i, pattern in enumerate(additions.secrets):
        groups = checked(pattern).groups
        spec = DetectorSpec(
            name=f"config_secret_{i + 1}",
            kind="secret",
            action="mask",
            description=f"redaction.secrets[{i}]",
            pattern=pattern,
            group=1 if groups else 0,
            in_prose=True,
        )
        out.append(_config(spec, f"secrets[{i}]"))
    if additions.never_show:
        words = "|".join(_word(w) for w in additions.never_show)
        spec = DetectorSpec(
            name="config_never_show",
            kind="never_show",
            action="mask",
            description="redaction.never_show",
            pattern=f"(?i)(?:{words})",
            in_prose=True,
        )
        out.append(_config(spec, "never_show"))
    if additions.mask_headers:
        names = "|".join(escape(name) for name in additions.mask_headers)
        spec = DetectorSpec(
            name="config_mask_headers",
            kind="secret",
            action="mask",
            description="redaction.mask_headers",
            pattern=(
                rf"(?i)\b(?:{names})[\"']?[ \t]{{0,3}}[:=][ \t]{{0,3}}"
                r"(\"[^\"\n]*\"|'[^'\n]*'|[^\n\"'<>}\]]+)"
            ),
            group=1,
            check="secret_value",
            in_prose=True,
        )
        out.append(_config(spec, "mask_headers"))
    if additions.internal_domains:
        suffixes = "|".join(re.escape(s) for s in additions.internal_domains)
        spec = DetectorSpec(
            name="config_internal_domains",
            kind="internal_host",
            action="replace",
            description="redaction.internal_domains",
            engine="re",
            # the shipped internal_domain's shape, with the operator's suffixes (escaped)
            pattern=(
                r"(?i)(?<![\w.+-])(?:[\w.+-]{1,64}@)?(?:[a-z0-9_-]{1,63}\.){0,10}[a-z0-9_-]{1,63}"
                rf"\.(?:{suffixes})(?![\w-])(?::\d{{1,5}})?"
            ),
            gate="auto",
            replacement=HOST_WORD,
            host_name=True,
            log=True,
            in_prose=True,
            before=anchor,
        )
        out.append(_config(spec, "internal_domains"))
    for i, pattern in enumerate(additions.internal_hosts):
        spec = DetectorSpec(
            name=f"config_internal_host_{i + 1}",
            kind="internal_host",
            action="replace",
            description=f"redaction.internal_hosts[{i}]",
            pattern=pattern,
            replacement=HOST_WORD,
            host_name=True,
            log=True,
            in_prose=True,
            before=anchor,
        )
        out.append(_config(spec, f"internal_hosts[{i}]"))
    out.extend(load_detector_files(additions.detectors, shipped=False, max_bytes=max_bytes))
    return out
