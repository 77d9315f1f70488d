"""The settings as an operator may be shown them (``mend config --show``, the ``started`` log line):
secrets masked, passwords taken out of URLs. What is masked is data: the keys below."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit, urlunsplit

from proxy.config.settings import Settings

#: What a masked value is shown as.
MASK = "***"

#: Keys whose value is a secret wherever they are: the admin token, the session hash key.
SECRET_KEYS = frozenset({"admin_token", "secret"})

#: Keys of mappings whose every value may be a secret: OTLP export headers (a vendor's API key).
SECRET_MAPPINGS = frozenset({"headers"})

#: Keys of lists whose every item may be a secret: words never shown.
SECRET_LISTS = frozenset({"never_show"})


def shown_url(url: str) -> str:
    """``url`` without its password, user name or userinfo: ``http://***@host/``. Anything that
    is not a URL with userinfo comes back as it is."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return url
    if "@" not in parts.netloc:
        return url
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{MASK}@{host}"))


def _masked(key: str, value: Any) -> Any:
    if value is None:
        return None
    if key in SECRET_KEYS:
        return MASK
    if key in SECRET_MAPPINGS and isinstance(value, dict):
        return dict.fromkeys(value, MASK)
    if key in SECRET_LISTS and isinstance(value, list):
        return [MASK for _ in value]
    return _walk(value)


def _walk(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _masked(key, item) for key, item in value.items()}
    if isinstance(value, list):
        return [_walk(item) for item in value]
    if isinstance(value, str):
        return shown_url(value)
    return value


def shown_settings(settings: Settings) -> dict[str, Any]:
    """Every setting in force, defaults included, as plain JSON-able data with secrets masked."""
    masked: dict[str, Any] = _walk(settings.model_dump(mode="json"))
    return masked


def shown_upstreams(settings: Settings) -> dict[str, str]:
    """Each route's upstream by route name, without userinfo (for the ``started`` line)."""
    return {route.name: shown_url(route.upstream) for route in settings.routes}
