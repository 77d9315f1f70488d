"""What OpenAPI validation costs per request (``python -m bench.openapi``).

Two measurements, both of a *valid* request (the one that must stay cheap: it still goes to the
upstream), ``POST /ok`` with a 160-byte JSON order (nested object, array of objects, enum,
pattern, format, bounds; tests/data/openapi/shop-3.0.yaml's schema):

1. **in process**: the validation step alone (match the operation, coerce the parameters,
   parse and check the body: ``Spec.locate`` + ``Checker.check``), median of 5 runs of 20,000;
   and the enrichment of one error envelope (``enrich``), which only envelopes pay.
2. **instructions**: the same two mend processes (below) under callgrind, instructions per
   request over 200 POSTs after 40 of warm-up (``bench/callgrind.py``'s method): the figure a
   busy machine cannot move.
3. **end to end**: two mend processes in front of the benchmark's nginx upstream, both with the
   document, one with ``--validate-requests``; ``wrk`` POSTs the body (a Lua script sets method,
   body and Content-Type, the same for both), at 1 and 32 connections, configurations alternated,
   3 repeats of 5 s; medians. mend on core 1, nginx and wrk on core 0, as in the harness.
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from multidict import CIMultiDict, MultiDict

from bench import callgrind, upstream
from bench.callgrind import _TOTAL
from bench.procs import ProcessGroup, free_port, pinned, wait_ready
from bench.wrk import parse_wrk
from proxy.policy.envelope.model import Category, Envelope, InvalidField
from proxy.policy.openapi.agent_request import Request
from proxy.policy.openapi.enrich import enrich
from proxy.policy.openapi.spec import Mount, Spec

REPO = Path(__file__).resolve().parent.parent
BODY = {
    "customer": {"email": "agent@example.com", "name": "Zoe"},
    "priority": "high",
    "note": None,
    "items": [{"sku": "ABC-1234", "qty": 2}, {"sku": "XYZ-0001", "qty": 1}],
}


def _document(tmp: Path) -> Path:
    """The shop document with ``POST /ok`` taking a new order (nginx answers /ok to any method)."""
    data = yaml.safe_load((REPO / "tests" / "data" / "openapi" / "shop-3.0.yaml").read_text())
    data["servers"] = [{"url": "/"}]
    data["paths"]["/ok"] = {"post": dict(data["paths"]["/orders"]["post"], operationId="ok")}
    path = tmp / "bench-openapi.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def in_process(document: Path, rounds: int = 5, count: int = 20_000) -> dict[str, float]:
    spec = Spec.load(document)
    mount = Mount("/", False, "")
    body = json.dumps(BODY).encode()
    headers = CIMultiDict({"Content-Type": "application/json"})
    query: MultiDict[str] = MultiDict()

    def check() -> None:
        located = spec.locate("POST", "/ok", mount)
        assert located is not None
        assert located.match is not None
        found = spec.checker.check(located.match, query, headers, "application/json", body)
        assert not found, found

    envelope = Envelope(
        code="VALIDATION_FAILED",
        message="m",
        category=Category.VALIDATION,
        severity="error",
        retryable=False,
        action="fix_request",
        hint="h",
        request_id="req_1",
        upstream_status=422,
        rule="r",
        field="/priority",
        invalid_fields=(InvalidField(field="/priority", reason="is invalid"),),
    )
    request = Request("POST", "/ok", query, headers, None, BODY)

    def enriched() -> None:
        enrich(envelope, spec, mount, request)

    out = {}
    for name, fn in (("validate_us", check), ("enrich_us", enriched)):
        runs = []
        for _ in range(rounds):
            start = time.perf_counter()
            for _ in range(count):
                fn()
            runs.append((time.perf_counter() - start) / count * 1e6)
        out[name] = round(statistics.median(runs), 2)
    return out


_LUA = """wrk.method = "POST"
wrk.body = '{body}'
wrk.headers["Content-Type"] = "application/json"
"""


def end_to_end(document: Path, tmp: Path, repeats: int, seconds: int) -> dict[str, Any]:
    group = ProcessGroup(tmp)
    try:
        up_port = free_port()
        conf = upstream.write_upstream_config(tmp, up_port)
        group.start("upstream", pinned(upstream.nginx_cmd(conf), "0"))
        time.sleep(0.5)
        script = tmp / "post.lua"
        script.write_text(_LUA.format(body=json.dumps(BODY)))
        servers = {}
        for name, extra in (("document", []), ("validating", ["--validate-requests"])):
            port, admin = free_port(), free_port()
            cmd = [
                sys.executable, "-m", "proxy", "run",
                "--upstream", f"http://127.0.0.1:{up_port}",
                "--listen", f"127.0.0.1:{port}", "--admin-listen", f"127.0.0.1:{admin}",
                "--openapi", str(document), *extra,
            ]  # fmt: skip
            proc = group.start(name, pinned(cmd, "1"), cwd=REPO)
            wait_ready(proc, admin, "/readyz", timeout=60)
            servers[name] = port
        results: dict[str, dict[int, list[tuple[float, float]]]] = {n: {} for n in servers}
        for repeat in range(repeats):
            order = list(servers) if repeat % 2 == 0 else list(reversed(servers))
            for connections in (1, 32):
                for name in order:
                    cmd = ["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "--latency",
                           "-s", str(script), f"http://127.0.0.1:{servers[name]}/ok"]  # fmt: skip
                    done = subprocess.run(
                        pinned(cmd, "0"), capture_output=True, text=True, timeout=seconds + 60,
                        check=True,
                    )  # fmt: skip
                    result = parse_wrk(done.stdout)
                    if result.non_2xx_3xx:
                        raise SystemExit(f"{name}: {result.non_2xx_3xx} non-2xx answers")
                    results[name].setdefault(connections, []).append(
                        (result.requests_per_sec, result.p50_us)
                    )
        out: dict[str, Any] = {}
        for name, by_c in results.items():
            for connections, runs in by_c.items():
                out[f"{name}_c{connections}"] = {
                    "rps": round(statistics.median(r for r, _ in runs)),
                    "p50_us": round(statistics.median(p for _, p in runs)),
                }
        for connections in (1, 32):
            base, checked = out[f"document_c{connections}"], out[f"validating_c{connections}"]
            out[f"ratio_c{connections}"] = round(checked["rps"] / base["rps"], 3)
            out[f"extra_us_per_request_c{connections}"] = round(
                1e6 / checked["rps"] - 1e6 / base["rps"], 1
            )
        return out
    finally:
        group.close()


def _post(port: int, total: int, body: bytes) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    try:
        for _ in range(total):
            conn.request("POST", "/ok", body=body, headers={"Content-Type": "application/json"})
            response = conn.getresponse()
            response.read()
            if response.status != 200:
                raise SystemExit(f"POST /ok answered {response.status}")
    finally:
        conn.close()


def instructions(document: Path, tmp: Path, requests: int = 200) -> dict[str, Any]:
    """Instructions per valid POST, with the document and with validation (callgrind)."""
    group = ProcessGroup(tmp)
    body = json.dumps(BODY).encode()
    out: dict[str, Any] = {}
    try:
        up_port = free_port()
        group.start("upstream", upstream.nginx_cmd(upstream.write_upstream_config(tmp, up_port)))
        for name, extra in (("document", []), ("validating", ["--validate-requests"])):
            port, admin = free_port(), free_port()
            dump = tmp / f"callgrind-{name}.out"
            cmd = [
                sys.executable, "-m", "proxy", "run", "--no-default-packs",
                "--upstream", f"http://127.0.0.1:{up_port}",
                "--listen", f"127.0.0.1:{port}", "--admin-listen", f"127.0.0.1:{admin}",
                "--openapi", str(document), *extra,
            ]  # fmt: skip
            proc = group.start(f"cg-{name}", callgrind.wrap(cmd, dump), cwd=REPO)
            wait_ready(proc, admin, "/readyz", timeout=900)
            _post(port, 40, body)
            before = set(tmp.glob(dump.name + "*"))
            callgrind._control(proc, "--zero")
            callgrind._control(proc, "--instr=on")
            _post(port, requests, body)
            callgrind._control(proc, "--instr=off")
            callgrind._control(proc, "--dump")
            dumps = sorted(set(tmp.glob(dump.name + "*")) - before)
            totals = [int(m) for f in dumps for m in _TOTAL.findall(f.read_text(errors="replace"))]
            out[f"{name}_per_request"] = round(max(totals) / requests)
            group.stop(proc)
        out["ratio"] = round(out["validating_per_request"] / out["document_per_request"], 3)
        out["extra_per_request"] = out["validating_per_request"] - out["document_per_request"]
        return out
    finally:
        group.close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--no-load", action="store_true", help="no wrk runs")
    parser.add_argument("--instructions", action="store_true", help="count under callgrind")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="mend-bench-openapi-") as name:
        tmp = Path(name)
        document = _document(tmp)
        report: dict[str, Any] = {"in_process": in_process(document)}
        print(json.dumps(report), flush=True)
        if args.instructions:
            report["instructions"] = instructions(document, tmp)
            print(json.dumps(report), flush=True)
        if not args.no_load:
            report["end_to_end"] = end_to_end(document, tmp, args.repeats, args.seconds)
        print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
