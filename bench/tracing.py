"""What tracing costs per request (``python -m bench.tracing``): instructions under callgrind.

The bench's nginx upstream, and mend (``--no-watch``, default packs, as the instructions section
runs it) under ``valgrind --tool=callgrind`` in up to four configurations, one process each:

- ``before``: another source tree (``--before DIR``, e.g. ``git archive <commit>`` unpacked), to
  show that mend without tracing costs what it did before tracing existed;
- ``off``: this tree, no ``OTEL_*`` variable (the SDK is not even imported);
- ``on``: ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` set, every trace sampled; spans go to the
  upstream's ``/ok`` (nginx answers any POST there with 200), so the export thread's work
  (batching, protobuf, the HTTP POST) is counted with the requests;
- ``unsampled``: the same with ``OTEL_TRACES_SAMPLER=always_off`` (spans made, none exported).

Per path (``/ok``, ``/err500``) the counters are zeroed, switched on for ``--requests``
sequential keep-alive requests after half as many of warm-up, and dumped
(``bench/callgrind.py``). Prints one JSON object: instructions per request by configuration.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench import callgrind, upstream
from bench.procs import ProcessGroup, free_port, wait_ready

REPO = Path(__file__).resolve().parent.parent
PATHS = ("/ok", "/err500")


def _environment(name: str, up_port: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    if name in ("on", "unsampled"):
        env["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] = f"http://127.0.0.1:{up_port}/ok"
        env["OTEL_TRACES_SAMPLER"] = "always_on" if name == "on" else "always_off"
    return env


def count(
    group: ProcessGroup, tmp: Path, name: str, tree: Path, up_port: int, requests: int
) -> dict[str, int]:
    """Instructions per request for each path, mend from ``tree`` in configuration ``name``."""
    port, admin = free_port(), free_port()
    dump = tmp / f"callgrind-{name}.out"
    cmd = [
        sys.executable, "-m", "proxy", "run", "--no-watch",
        "--upstream", f"http://127.0.0.1:{up_port}",
        "--listen", f"127.0.0.1:{port}", "--admin-listen", f"127.0.0.1:{admin}",
    ]  # fmt: skip
    proc = group.start(
        f"cg-{name}", callgrind.wrap(cmd, dump), cwd=tree, env=_environment(name, up_port)
    )
    try:
        wait_ready(proc, admin, "/readyz", timeout=900)
        return {
            path: round(
                callgrind.count(proc, dump, port, path, requests=requests, warmup=requests // 2)
                / requests
            )
            for path in PATHS
        }
    finally:
        group.stop(proc)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--before", type=Path, help="a source tree to count as 'before'")
    parser.add_argument(
        "--configs", default="before,off,on,unsampled", help="comma-separated, in order"
    )
    args = parser.parse_args(argv)
    missing = callgrind.available()
    if missing:
        print(missing, file=sys.stderr)
        return 1
    report: dict[str, Any] = {"requests": args.requests, "per_request": {}}
    with tempfile.TemporaryDirectory(prefix="mend-bench-tracing-") as name:
        tmp = Path(name)
        group = ProcessGroup(tmp)
        try:
            up_port = free_port()
            conf = upstream.write_upstream_config(tmp, up_port)
            group.start("upstream", upstream.nginx_cmd(conf))
            for config in args.configs.split(","):
                if config == "before" and args.before is None:
                    continue
                tree = args.before if config == "before" else REPO
                counted = count(group, tmp, config, tree, up_port, args.requests)
                report["per_request"][config] = counted
                print(json.dumps(report), flush=True)
        finally:
            group.close()
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
