"""OpenAPI documents as published (GitHub's REST description, Petstore, Train Travel), served by a
real mock server (Stoplight Prism) and driven by real clients, behind ``mend run``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from proxy.openapi.spec import Spec
from tests.published.documents import document

#: What loading GitHub's document may take on a shared two-core machine (about 1 s alone).
GITHUB_LOAD_S = 8.0
#: Peak memory of a process that loaded it (about 120 MiB, the interpreter's 60 included).
GITHUB_RSS_MIB = 320

_MEASURE = """
import json, resource, sys, time
from pathlib import Path
from proxy.openapi.spec import Spec
started = time.perf_counter()
spec = Spec.load(Path(sys.argv[1]))
loaded = time.perf_counter() - started
for op in spec.operations.all[:100]:
    spec.checker.operation(op.method, op.path)
print(json.dumps({
    "operations": len(spec.operations.all),
    "load_s": loaded,
    "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
}))
"""


def _measure(path: Path) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, "-c", _MEASURE, str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    figures: dict[str, float] = json.loads(done.stdout)
    return figures


def test_githubs_document_is_ready_in_seconds() -> None:
    """GitHub's 13 MB description loads in seconds, its 1,223 operations found, in little memory."""
    figures = _measure(document("github"))
    print(f"GitHub's document: {figures}")
    assert figures["operations"] == 1223
    assert figures["load_s"] < GITHUB_LOAD_S
    assert figures["rss_mib"] < GITHUB_RSS_MIB


@pytest.mark.parametrize("name", ["petstore", "train-travel"])
def test_published_documents_load(name: str) -> None:
    """The classic Petstore (3.0) and the Train Travel API (3.1) load with their operations."""
    spec = Spec.load(document(name))
    assert spec.operations.all
    assert all(op.id for op in spec.operations.all)
