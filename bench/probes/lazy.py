"""Issue 43, start-up and memory: what the OpenAPI modules, the OpenAPI gate and the MCP tools
cost when imported after everything else ``mend run`` needs (bench/README.md).

    bench/.venv-image/bin/python bench/probes/lazy.py
"""

from __future__ import annotations

import importlib
import sys
import time
from pathlib import Path

BEFORE = ("aiohttp.web", "pydantic", "yaml", "structlog", "re2", "orjson", "prometheus_client")
BEFORE_MEND = ("proxy.config.settings", "proxy.policy.evaluate")
FEATURES = (
    "proxy.policy.openapi.spec",
    "proxy.policy.openapi.enrich",
    "proxy.policy.openapi.operation_codes",
    "proxy.policy.openapi.check_first",
    "proxy.edge.openapi_gate",
    "proxy.edge.mcptools.mcp_server",
    "proxy.edge.mcptools.internal",
)


def rss_mb() -> float:
    status = Path("/proc/self/status").read_text()
    return int(status.split("VmRSS:")[1].split()[0]) / 1024


def main() -> None:
    for name in (*BEFORE, *BEFORE_MEND):
        importlib.import_module(name)
    loaded = set(sys.modules)
    rss, start = rss_mb(), time.process_time()
    for name in FEATURES:
        importlib.import_module(name)
    spent, grown = time.process_time() - start, rss_mb() - rss
    print(
        f"{len(set(sys.modules) - loaded)} modules, {1000 * spent:.0f} ms CPU, +{grown:.1f} MB RSS"
    )


if __name__ == "__main__":
    main()
