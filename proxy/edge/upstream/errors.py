"""The one family of exceptions the upstream client raises (``edge/failures.py`` translates it)."""

from __future__ import annotations


class UpstreamError(Exception):
    """Talking to the upstream failed; the request is never sent again (see ``pool.py``)."""


class ConnectError(UpstreamError):
    """No connection was made (refused, unreachable, no such host, a TLS handshake that failed):
    nothing was sent. ``__cause__`` is the ``OSError`` (or ``ssl.SSLError``) behind it."""


class ConnectTimeout(ConnectError, TimeoutError):
    """No connection (TCP and TLS handshake) within the route's ``connect_timeout``."""


class ReadTimeout(UpstreamError, TimeoutError):
    """The upstream sent no head within ``read_timeout`` of the request being sent, paused longer
    than the current read timeout in its body, or stopped reading the request body."""


class ProtocolError(UpstreamError):
    """The upstream's bytes are not an HTTP/1.1 response mend accepts: malformed, a head over
    the limits, too many interim (1xx) responses, or bytes nobody asked for."""


class Disconnected(UpstreamError):
    """The connection ended (a reset, an EOF, a TLS alert) before the response did;
    ``__cause__`` is the ``OSError`` or ``ssl.SSLError`` when the transport gave one."""


class RequestBodyFailed(UpstreamError):
    """The request body's source failed while it was being sent; ``__cause__`` is mend's own
    failure (a body too large, an agent too slow)."""
