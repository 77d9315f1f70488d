"""Issue 43, start-up: where loading the shipped packs goes (YAML with lines, validation, the
checks across rules) and what a cache of the parsed data would leave (bench/README.md).

    bench/.venv-image/bin/python bench/probes/packs.py
"""

from __future__ import annotations

import marshal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from proxy.config.yamlfile import parse_yaml
from proxy.policy.rules import rulefile
from proxy.policy.rules.rulespec import RuleFile

ROOT = Path(__file__).resolve().parents[2]


def best(work: Callable[[], Any], times: int = 5) -> float:
    """The least CPU time of ``times`` runs, in ms."""
    spent = []
    for _ in range(times):
        start = time.process_time()
        work()
        spent.append(time.process_time() - start)
    return 1000 * min(spent)


def main() -> None:
    texts = [(f, f.read_text("utf-8")) for f in sorted((ROOT / "rules").glob("*.yaml"))]
    parsed = [parse_yaml(text, str(file)) for file, text in texts]
    documents = [
        {"rules": data} if isinstance(data, list) else data
        for data, _ in parsed
        if data is not None
    ]
    whole = best(lambda: rulefile.load_rules([ROOT / "rules"]))
    yaml = best(lambda: [parse_yaml(text, str(file)) for file, text in texts])
    valid = best(lambda: [RuleFile.model_validate(d) for d in documents])
    blob = marshal.dumps(
        [(d, {"/".join(map(str, k)): v for k, v in lines.items()}) for d, lines in parsed]
    )
    cached = best(lambda: marshal.loads(blob))
    print(f"{len(texts)} files: load_rules {whole:.1f} ms CPU")
    rest = whole - yaml - valid
    print(f"  YAML with lines {yaml:.1f} ms, validation {valid:.1f} ms, the rest {rest:.1f} ms")
    print(f"  the parsed data from marshal ({len(blob)} bytes): {cached:.2f} ms")


if __name__ == "__main__":
    main()
