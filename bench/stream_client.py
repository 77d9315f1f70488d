"""Download one URL and throw the bytes away; print JSON {status, bytes, seconds}.

Runs as its own (pinned) process so that reading 1 GiB does not share a core, or a GIL, with
the harness that samples the proxy's memory meanwhile.
"""

from __future__ import annotations

import http.client
import json
import sys
import time
from urllib.parse import urlsplit

CHUNK = 1024 * 1024


def fetch(url: str, timeout: float) -> dict[str, float | int]:
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=timeout)
    start = time.monotonic()
    try:
        conn.request("GET", parts.path or "/")
        resp = conn.getresponse()
        total = 0
        while chunk := resp.read(CHUNK):
            total += len(chunk)
        return {"status": resp.status, "bytes": total, "seconds": time.monotonic() - start}
    finally:
        conn.close()


def main() -> None:
    url = sys.argv[1]
    timeout = float(sys.argv[2]) if len(sys.argv) > 2 else 120.0
    print(json.dumps(fetch(url, timeout)))


if __name__ == "__main__":
    main()
