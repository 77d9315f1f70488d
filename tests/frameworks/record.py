"""Record every case's answer straight from its framework app, for ``mend check --coverage``.

``python -m tests.frameworks.record tests/frameworks/recorded`` starts the apps (not mend), sends
each case's request(s) and writes ``<case id>.yaml`` in the recorded-response shape
(``request``, ``response``). GraphQL cases are left out: ``--coverage`` replays a recording as
plain HTTP, where a GraphQL 200 is a success.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import httpx
import yaml

from tests.frameworks.scoring import Case, load_cases
from tests.frameworks.stack import running_stack
from tests.frameworks.test_frameworks import request_kwargs

#: headers that change on every run or say nothing about the error
_VOLATILE = {"date", "connection", "keep-alive", "content-length", "etag", "x-request-id"}


def recording(case: Case, resp: httpx.Response) -> dict[str, Any]:
    r = case.request
    request: dict[str, Any] = {"method": r.method, "path": r.path.partition("?")[0]}
    if "?" in r.path:
        request["query"] = r.path.partition("?")[2]
    headers = {k: v for k, v in resp.headers.items() if k.lower() not in _VOLATILE}
    response: dict[str, Any] = {"status": resp.status_code, "headers": headers}
    try:
        response["json"] = json.loads(resp.content)
    except ValueError:
        response["body"] = resp.text
    return {"name": case.id, "request": request, "response": response}


def main(out: Path) -> None:
    cases = [c for c in load_cases() if c.app != "strawberry"]
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as logs, running_stack(Path(logs)) as stack:
        for case in cases:
            if case.app in stack.skipped:
                continue
            url = f"http://127.0.0.1:{stack.apps[case.app].port}{case.request.path}"
            with httpx.Client(timeout=15.0) as client:
                for _ in range(case.send):
                    resp = client.request(case.request.method, url, **request_kwargs(case))
            text = yaml.safe_dump(recording(case, resp), sort_keys=False, allow_unicode=True)
            (out / f"{case.id}.yaml").write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
