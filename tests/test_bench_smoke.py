"""The benchmark harness: its wrk parser, and one short end-to-end run (needs nginx and wrk)."""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench import callgrind, report, rulegen, upstream
from bench.harness import Harness, parse_args
from bench.procs import BenchError
from bench.upstream import nginx_path
from bench.wrk import parse_wrk

REPO = Path(__file__).resolve().parent.parent

WRK_US = """Running 1s test @ http://127.0.0.1:18777/
  1 threads and 1 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency   253.11us   40.78us   1.10ms   92.10%
    Req/Sec     3.90k   120.33     4.02k    80.00%
  Latency Distribution
     50%  245.00us
     75%  260.00us
     90%  290.00us
     99%  410.00us
  3921 requests in 1.00s, 668.97KB read
Requests/sec:   3920.14
Transfer/sec:    668.79KB
"""

WRK_MS_NON2XX = """Running 1s test @ http://127.0.0.1:18777/nonexist
  1 threads and 32 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     7.35ms    1.63ms  21.81ms   93.60%
    Req/Sec     4.40k   369.29     4.85k    70.00%
  Latency Distribution
     50%    6.90ms
     75%    7.36ms
     90%    8.39ms
     99%   16.11ms
  8740 requests in 2.00s, 1.49MB read
  Non-2xx or 3xx responses: 8740
Requests/sec:   4367.77
Transfer/sec:    763.57KB
"""

WRK_S_ERRORS = """Running 5s test @ http://127.0.0.1:9000/big
  1 threads and 128 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     1.21s   300.12ms   1.98s    70.00%
    Req/Sec    95.12     20.01   130.00     65.00%
  Latency Distribution
     50%    1.20s
     75%    1.41s
     90%    1.70s
     99%    1.95s
  480 requests in 5.01s, 0.94GB read
  Socket errors: connect 0, read 2, write 0, timeout 12
Requests/sec:     95.81
Transfer/sec:    191.62MB
"""

# wrk prints "Requests/sec" without a suffix; a k suffix must still parse (as on Req/Sec).
WRK_K_SUFFIX = """  1 threads and 128 connections
  Latency Distribution
     50%  980.00us
     75%    1.10ms
     90%    1.30ms
     99%    2.50ms
  520000 requests in 10.00s, 80.00MB read
Requests/sec:     52.00k
Transfer/sec:      8.00MB
"""


@pytest.mark.parametrize(
    ("text", "rps", "p50_us", "p99_us", "requests", "non2xx", "socket_errors"),
    [
        pytest.param(WRK_US, 3920.14, 245.0, 410.0, 3921, 0, 0, id="microseconds"),
        pytest.param(WRK_MS_NON2XX, 4367.77, 6900.0, 16110.0, 8740, 8740, 0, id="ms-non2xx"),
        pytest.param(WRK_S_ERRORS, 95.81, 1.2e6, 1.95e6, 480, 0, 14, id="seconds-errors"),
        pytest.param(WRK_K_SUFFIX, 52000.0, 980.0, 2500.0, 520000, 0, 0, id="k-suffix"),
    ],
)
def test_parse_wrk(
    text: str,
    rps: float,
    p50_us: float,
    p99_us: float,
    requests: int,
    non2xx: int,
    socket_errors: int,
) -> None:
    result = parse_wrk(text)
    assert result.requests_per_sec == pytest.approx(rps)
    assert result.p50_us == pytest.approx(p50_us)
    assert result.p99_us == pytest.approx(p99_us)
    assert result.requests == requests
    assert result.non_2xx_3xx == non2xx
    assert result.error_count == socket_errors


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("", id="empty"),
        pytest.param(WRK_US.replace("Requests/sec", "Reqs"), id="no-rps"),
        pytest.param(WRK_US.replace("     99%  410.00us\n", ""), id="no-p99"),
        pytest.param("unable to connect to 127.0.0.1:1 Connection refused\n", id="refused"),
    ],
)
def test_parse_wrk_rejects_incomplete_output(text: str) -> None:
    with pytest.raises(ValueError, match="wrk output"):
        parse_wrk(text)


def test_update_readme_replaces_only_the_marked_section(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text(f"intro\n{report.START}\nold\n{report.END}\noutro\n")
    report.update_readme(readme, "new table\n")
    assert readme.read_text() == f"intro\n{report.START}\n\nnew table\n\n{report.END}\noutro\n"


def _missing_tools() -> list[str]:
    missing = [tool for tool in ("wrk", "taskset") if shutil.which(tool) is None]
    if nginx_path() is None:
        missing.append("nginx")
    return missing


@pytest.mark.skipif(
    bool(_missing_tools()),
    reason=f"needs {', '.join(_missing_tools())} (scripts/install-system-deps installs them)",
)
def test_quick_run_measures_every_configuration_and_path(tmp_path: Path) -> None:
    configs = ["bare", "bare-uvloop", "nginx"]
    if (REPO / "proxy" / "tools" / "cli.py").exists():
        configs.append("mend")
    out = tmp_path / "results.json"
    done = subprocess.run(
        [
            str(REPO / "bench" / "run"),
            "--quick",
            "--only",
            ",".join(configs),
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
        cwd=REPO,
        env={**os.environ, "BENCH_PYTHON": sys.executable},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(out.read_text())
    summary = results["summary"]
    assert sorted(summary) == sorted(configs)
    for config in configs:
        for path in ("/ok", "/big", "/err500", "/err422", "/err429"):
            cell = summary[config][path]["32"]
            assert cell["requests_per_sec"] > 0, (config, path)
            assert cell["p50_us"] > 0, (config, path)
            assert cell["p99_us"] > 0, (config, path)
    assert "### Throughput and latency" in done.stdout


@pytest.mark.parametrize("count", [10, 1000])
def test_generated_rules_load_with_mends_loader(tmp_path: Path, count: int) -> None:
    rulefile = pytest.importorskip("proxy.policy.rules.rulefile")
    rules = rulefile.load_rules([rulegen.write_rules(tmp_path, count)])
    assert len(rules) == count


@pytest.mark.skipif(nginx_path() is None, reason="needs nginx")
def test_generated_nginx_configs_are_valid(tmp_path: Path) -> None:
    for conf in (
        upstream.write_upstream_config(tmp_path, 18081),
        upstream.write_proxy_config(tmp_path, 18080, 18081),
    ):
        done = subprocess.run(
            [*upstream.nginx_cmd(conf), "-t"], capture_output=True, text=True, check=False
        )
        assert done.returncode == 0, done.stderr


def _results(mend_rps: float, bare_rps: float, growth: int) -> dict[str, Any]:
    def cell(rps: float) -> dict[str, Any]:
        return {"32": {"requests_per_sec": rps, "p50_us": 1e6 / rps, "p99_us": 2e6 / rps}}

    return {
        "baseline": "bare",
        "summary": {
            "mend": {"/ok": cell(mend_rps), "/err500": cell(mend_rps / 2)},
            "bare": {"/ok": cell(bare_rps), "/err500": cell(bare_rps)},
        },
        "stream": {"mend": {"growth": growth}},
    }


@pytest.mark.parametrize(
    ("mend_rps", "growth", "success", "error", "memory"),
    [
        pytest.param(990.0, 1 << 20, "met", "**missed**", "met", id="fast-success-slow-errors"),
        pytest.param(900.0, 30 << 20, "**missed**", "**missed**", "**missed**", id="all-missed"),
        pytest.param(2000.0, 0, "met", "met", "met", id="all-met"),
    ],
)
def test_targets_verdicts(
    mend_rps: float, growth: int, success: str, error: str, memory: str
) -> None:
    rows = {row[0]: row for row in report.targets(_results(mend_rps, 1000.0, growth))}
    verdicts = [rows[name][2] for name in rows]
    assert verdicts[0] == success
    assert verdicts[2] == error
    assert verdicts[4] == memory
    assert verdicts[3] == "n/a"  # no rules section in these results
    assert "### Throughput and latency" in report.render(_results(mend_rps, 1000.0, growth))


def test_a_failed_section_is_recorded_and_the_run_goes_on() -> None:
    harness = Harness(parse_args(["--quick"]))
    try:

        def boom() -> None:
            raise BenchError("mend exited with code 2 before it was ready:\nrules/x.yaml:3: bad")

        harness.guarded("reload", boom)
        harness.guarded("startup", lambda: None)
    finally:
        harness.close()
    assert list(harness.results["failed"]) == ["reload"]
    assert harness.results["notes"] == [
        "section reload failed: mend exited with code 2 before it was ready: ... "
        "rules/x.yaml:3: bad"
    ]


@pytest.mark.skipif(
    bool(callgrind.available()) or nginx_path() is None,
    reason="needs valgrind and nginx (scripts/install-system-deps installs them)",
)
def test_callgrind_counts_instructions_per_request(tmp_path: Path) -> None:
    """The bare proxy under callgrind: more requests count proportionally more instructions."""
    harness = Harness(parse_args(["--quick", "--no-pin"]))
    try:
        harness.start_upstream()
        cg_out = tmp_path / "cg.out"
        server = harness.start_config(
            "bare-uvloop", wrap=functools.partial(callgrind.wrap, out_file=cg_out)
        )
        few = callgrind.count(server.proc, cg_out, server.port, "/ok", requests=20, warmup=10)
        many = callgrind.count(server.proc, cg_out, server.port, "/ok", requests=80, warmup=0)
    finally:
        harness.close()
    # every request costs some instructions; counts are zeroed between paths, not summed
    assert few > 20 * 10_000
    assert 3.5 < many / few < 4.5


def test_instructions_section_renders_the_ratio() -> None:
    """The report shows both counts in thousands and baseline/mend as the ratio."""
    text = "\n".join(
        report.instructions_section(
            {
                "instructions": {
                    "available": True,
                    "baseline": "bare-uvloop",
                    "per_request": {
                        "mend": {"/ok": 640_000.0},
                        "bare-uvloop": {"/ok": 480_000.0},
                    },
                }
            }
        )
    )
    assert "| `/ok` | 640 k | 480 k | 0.75x |" in text


def test_retries_section_renders_on_off_and_the_retried_503() -> None:
    """The retry policy's table: each path with retries on and off, and a retried 503 against
    one answered at once."""
    text = "\n".join(
        report.retries_section(
            {
                "retries": {
                    "available": True,
                    "per_request": {
                        "retries on": {"/ok": 606_000.0, "/flaky": 1_350_000.0},
                        "retries off": {"/ok": 586_000.0, "/err503": 1_344_000.0},
                    },
                    "retries_per_request": {"retries on": {"/flaky": 1.0}},
                    "status": {"retries on": {"/ok": 200, "/flaky": 200}},
                }
            }
        )
    )
    assert "| `/ok` | 606 k | 0.00 | 200 | 586 k | — | +20 k (+3.4 %) |" in text
    assert "| `/flaky` | 1,350 k | 1.00 | 200 | — | — | — |" in text
    assert "(retries off): +6 k (+0.4 %)." in text
