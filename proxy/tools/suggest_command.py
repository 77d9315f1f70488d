"""``mend suggest``: the rules a running mend proposes for what only a fallback explained.

It asks the admin port (``GET /suggest``, with the admin token when one is set) and prints each
proposal, or with ``--out DIR`` writes ``DIR/<name>.yaml`` and its cases ``DIR/tests/<name>.yaml``
for the operator to review, ``mend check`` and ``mend test``, and copy into the rule directory.
A file never overwrites one already there; nothing is loaded.
"""

from __future__ import annotations

import argparse
import os
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import orjson

#: seconds to wait for the admin port's answer
TIMEOUT_S = 10.0


def fetch(admin: str, token: str | None) -> list[dict[str, Any]]:
    """The admin port's proposals; ``OSError`` when it cannot be asked."""
    request = urllib.request.Request(f"{admin.rstrip('/')}/suggest")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
        body: dict[str, Any] = orjson.loads(response.read())
    return list(body.get("proposals", []))


def _url(text: str) -> str:
    if not text.startswith(("http://", "https://")):
        text = f"http://{text}"
    return text


def write(proposals: list[dict[str, Any]], out: Path) -> list[Path]:
    """Each proposal's two files under ``out``; those already there are left alone."""
    (out / "tests").mkdir(parents=True, exist_ok=True)
    written = []
    for proposal in proposals:
        name = proposal["name"]
        for path, text in ((out / f"{name}.yaml", proposal["rules"]),
                           (out / "tests" / f"{name}.yaml", proposal["cases"])):  # fmt: skip
            if path.exists():
                print(f"mend suggest: {path} exists, left as it is", file=sys.stderr)
                continue
            path.write_text(text, encoding="utf-8")
            written.append(path)
    return written


def suggest(args: argparse.Namespace) -> int:
    admin = _url(args.admin)
    token = args.token or os.environ.get("MEND_ADMIN_TOKEN")
    try:
        proposals = fetch(admin, token)
    except urllib.error.HTTPError as exc:
        print(f"mend: error: {admin}/suggest answered {exc.code} {exc.reason}", file=sys.stderr)
        return 1
    except (OSError, orjson.JSONDecodeError) as exc:
        print(f"mend: error: cannot ask {admin}/suggest: {exc}", file=sys.stderr)
        return 1
    if not proposals:
        print("mend suggest: nothing to propose: every error so far had a specific rule")
        return 0
    if args.out is None:
        for proposal in proposals:
            print(f"# --- {proposal['name']}.yaml\n{proposal['rules']}")
            print(f"# --- tests/{proposal['name']}.yaml\n{proposal['cases']}")
        return 0
    for path in write(proposals, Path(args.out)):
        print(f"wrote {path}")
    print(f"next: mend check {args.out} && mend test --rules {args.out} {args.out}/tests")
    return 0
