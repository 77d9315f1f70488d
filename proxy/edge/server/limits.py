"""What an agent's connection may take and send: nginx's and Envoy's bounds, as one value.

What nginx and Envoy bound by default is bounded on the agent's connections:

- a **header timeout**: from the first byte of a request head to its last; a client dripping its
  headers is disconnected, whatever the keep-alive timer says;
- a **keep-alive timeout**: a connection idle before its first request or between two is closed;
- **head sizes**: the target (414), each field, the field count and the whole head (431), checked
  as bytes arrive, never after buffering them;
- a **send timeout**: a response the agent takes nothing of for ``send_timeout`` is aborted;
- **envelopes for requests mend refuses itself** (400, 414, 431, a handler's bug as 500), with a
  request id and one log line, through the server's ``refuse``; the connection closes after it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Limits:
    #: seconds from a request head's first byte to its last (nginx ``client_header_timeout``)
    header_timeout: float = 60.0
    #: seconds a connection may sit idle before or between requests (``keepalive_timeout``)
    keepalive_timeout: float = 75.0
    #: the longest request target, in bytes (a longer one is a 414)
    max_line: int = 64 << 10
    #: the longest header field, name and value, in bytes (a longer one is a 431)
    max_field: int = 64 << 10
    #: the most header fields in one request (more is a 431)
    max_headers: int = 100
    #: seconds an unread request body is read and dropped after its response, so the agent
    #: sees the response before the close (aiohttp's and nginx's lingering close)
    lingering_s: float = 10.0
    #: requests parsed ahead of the one running (pipelining); past it the socket is not read
    max_queued: int = 8
    #: seconds a response may wait for the agent to take more of it (nginx ``send_timeout``):
    #: an agent that stops reading is disconnected, its upstream released
    send_timeout: float = 60.0

    @property
    def max_head(self) -> int:
        """The most bytes a whole request head may take (a bigger one is a 431): the target's
        limit and twice one field's, 192 KiB by default (Envoy's whole-head default is 60 KiB,
        nginx's 32 KiB). llhttp hands a field over only once it is whole, so this is what
        bounds the bytes one connection's head can hold while it arrives."""
        return self.max_line + 2 * self.max_field
