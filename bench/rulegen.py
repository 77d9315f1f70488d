"""Rule files that never match, to price the rule engine by the number of rules it walks.

Every generated rule asks for status 500 (so an index by status cannot skip it) and a body
regex that the benchmark's /err500 body does not contain (so the regex really runs over the
body). The request therefore pays for all N rules before it reaches the shipped packs.
"""

from __future__ import annotations

from pathlib import Path

_RULE = """  - id: bench.nomatch_{i:04d}
    description: benchmark filler rule {i}; never matches the benchmark upstream
    when:
      status: 500
      content_type: application/json
      body: "Bench{i:04d}Exception: (?P<detail>[^\\\\n]*)"
    envelope:
      code: BENCH_NOMATCH_{i:04d}
      category: internal
      message: "Benchmark filler rule {i} matched, which it never should."
      hint: "Remove the benchmark rule files from --rules."
"""


def write_rules(directory: Path, count: int) -> Path:
    """Write ``count`` non-matching rules into ``directory`` (one file); return the directory."""
    directory.mkdir(parents=True, exist_ok=True)
    text = f"pack: bench\nrules:\n{''.join(_RULE.format(i=i) for i in range(count))}"
    (directory / f"bench-{count}.yaml").write_text(text)
    return directory
