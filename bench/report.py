"""Markdown tables from a results dict, and the marked results section of bench/README.md."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

START = "<!-- results:start -->"
END = "<!-- results:end -->"

SUCCESS_PATHS = ("/ok", "/big")
ERROR_PATHS = ("/err500", "/err422", "/err429")
MiB = 1024 * 1024


def fmt_rps(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def fmt_us(value: float | None) -> str:
    if value is None:
        return "-"
    if value < 1000:
        return f"{value:.0f} µs"
    if value < 1_000_000:
        return f"{value / 1000:.2f} ms"
    return f"{value / 1e6:.2f} s"


def fmt_ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def fmt_mib(value: float | None) -> str:
    return "-" if value is None else f"{value / MiB:.1f} MiB"


def ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b == 0:
        return None
    return a / b


def cell(summary: dict[str, Any], config: str, path: str, conns: int | str) -> dict[str, Any]:
    found: dict[str, Any] = summary.get(config, {}).get(path, {}).get(str(conns), {})
    return found


def metric(
    summary: dict[str, Any], config: str, path: str, conns: int | str, key: str
) -> float | None:
    value = cell(summary, config, path, conns).get(key)
    return None if value is None else float(value)


def table(header: list[str], rows: Iterable[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def _conns(summary: dict[str, Any]) -> list[int]:
    found = {int(c) for per_path in summary.values() for cs in per_path.values() for c in cs}
    return sorted(found)


def _paths(summary: dict[str, Any]) -> list[str]:
    order = [*SUCCESS_PATHS, *ERROR_PATHS]
    found = {p for per_path in summary.values() for p in per_path}
    return [p for p in order if p in found] + sorted(found - set(order))


def baseline_of(results: dict[str, Any]) -> str:
    """The bare configuration mend is judged against (the one on mend's event loop)."""
    found: str = results.get("baseline") or "bare"
    return found


def matrix_section(results: dict[str, Any]) -> list[str]:
    summary: dict[str, Any] = results.get("summary") or {}
    if not summary:
        return []
    base = baseline_of(results)
    main = [c for c in ("mend", "bare", "bare-uvloop", "nginx") if c in summary]
    vs = [o for o in (base, "nginx") if "mend" in main and o in main]
    out = ["### Throughput and latency", ""]
    if "mend" in main:
        out += [
            f"mend runs on {results.get('meta', {}).get('mend_event_loop', '?')}; "
            f"ratios compare it with `{base}`.",
            "",
        ]
    header = ["path", "conns"]
    header += [f"{c} req/s" for c in main]
    header += [f"mend/{o} req/s" for o in vs]
    header += [f"{c} p50" for c in main]
    header += [f"mend/{o} p50" for o in vs[:1]]
    header += [f"{c} p99" for c in main]
    rows = []
    for path in _paths({k: v for k, v in summary.items() if k in main}):
        for conns in _conns(summary):
            if not any(cell(summary, c, path, conns) for c in main):
                continue

            def get(c: str, k: str, path: str = path, conns: int = conns) -> float | None:
                return metric(summary, c, path, conns, k)

            row = [f"`{path}`", str(conns)]
            row += [fmt_rps(get(c, "requests_per_sec")) for c in main]
            row += [
                fmt_ratio(ratio(get("mend", "requests_per_sec"), get(o, "requests_per_sec")))
                for o in vs
            ]
            row += [fmt_us(get(c, "p50_us")) for c in main]
            row += [fmt_ratio(ratio(get("mend", "p50_us"), get(o, "p50_us"))) for o in vs[:1]]
            row += [fmt_us(get(c, "p99_us")) for c in main]
            rows.append(row)
    out += table(header, rows)
    variants = [c for c in ("bare-uvloop", "bare-debian") if c in summary]
    if variants and "bare" in summary:
        out += ["", "### Event loop and interpreter (bare proxy, `/ok`)", ""]
        header = ["conns", "bare req/s"]
        for c in variants:
            header += [f"{c} req/s", f"{c}/bare"]
        header += ["bare p50"] + [f"{c} p50" for c in variants]
        rows = []
        for conns in _conns(summary):
            ref = metric(summary, "bare", "/ok", conns, "requests_per_sec")
            if ref is None:
                continue
            row = [str(conns), fmt_rps(ref)]
            for c in variants:
                v = metric(summary, c, "/ok", conns, "requests_per_sec")
                row += [fmt_rps(v), fmt_ratio(ratio(v, ref))]
            row.append(fmt_us(metric(summary, "bare", "/ok", conns, "p50_us")))
            row += [fmt_us(metric(summary, c, "/ok", conns, "p50_us")) for c in variants]
            rows.append(row)
        out += table(header, rows)
    return out


def rules_section(results: dict[str, Any]) -> list[str]:
    rules = results.get("rules")
    if not rules:
        return []
    if not rules.get("summary"):
        return ["### Rule-matching cost", "", f"not available: {rules.get('reason', '?')}"]
    summary = rules["summary"]
    names = sorted(summary, key=lambda n: int(n.split("-")[1]))
    base = names[0]
    rows = []
    for conns in _conns(summary):
        for name in names:
            rps = metric(summary, name, "/err500", conns, "requests_per_sec")
            p50 = metric(summary, name, "/err500", conns, "p50_us")
            rows.append(
                [
                    name.split("-")[1],
                    str(conns),
                    fmt_rps(rps),
                    fmt_us(p50),
                    fmt_us(metric(summary, name, "/err500", conns, "p99_us")),
                    fmt_ratio(
                        ratio(metric(summary, base, "/err500", conns, "requests_per_sec"), rps)
                    ),
                    fmt_ratio(ratio(p50, metric(summary, base, "/err500", conns, "p50_us"))),
                ]
            )
    return [
        "### Rule-matching cost (`/err500`, non-matching rules ahead of the shipped packs)",
        "",
        *table(
            ["rules", "conns", "req/s", "p50", "p99", "cost vs 10 (req/s)", "cost vs 10 (p50)"],
            rows,
        ),
    ]


def other_section(results: dict[str, Any]) -> list[str]:
    out: list[str] = []
    mem = results.get("memory") or {}
    stream = results.get("stream") or {}
    if mem or stream:
        out += ["### Memory (RSS, VmRSS of the process tree)", ""]
        rows = []
        if mem:
            rows += [
                ["mend idle after start-up", fmt_mib(mem.get("mend_idle_after_start"))],
                ["mend max under load (matrix)", fmt_mib(mem.get("mend_max_under_load"))],
                ["mend idle after load", fmt_mib(mem.get("mend_idle_after_load"))],
            ]
        for name, s in stream.items():
            rows.append(
                [
                    f"{name}: growth while streaming 1 GiB (max - before)",
                    f"{fmt_mib(s.get('growth'))} (from {fmt_mib(s.get('baseline_rss'))}; "
                    f"{s.get('bytes', 0) / MiB:,.0f} MiB in {s.get('seconds', 0):.1f} s)",
                ]
            )
        out += [*table(["what", "RSS"], rows), ""]
    startup = results.get("startup") or {}
    if startup:
        out += ["### Start-up (process start to ready, median of 5)", ""]
        out += table(
            ["proxy", "median", "ready when"],
            [[n, f"{s['median_s'] * 1000:.0f} ms", s["ready_probe"]] for n, s in startup.items()],
        )
        out.append("")
    reload_ = results.get("reload")
    if reload_:
        out += ["### Hot reload of 1,000 rules (`POST /-/reload` on the admin port)", ""]
        if reload_.get("available"):
            out.append(
                f"median {reload_['median_s'] * 1000:.0f} ms over "
                f"{len(reload_['all_s'])} reloads (HTTP {reload_['statuses']})"
            )
        else:
            out.append(f"not available: {reload_.get('reason')}")
        out.append("")
    workers = results.get("workers")
    if workers:
        out += ["### `--workers 2` vs 1 (`/ok`; proxy may use both cores)", ""]
        if workers.get("available"):
            s = workers["summary"]
            rows = []
            for conns in _conns(s):
                one = metric(s, "mend-1-worker", "/ok", conns, "requests_per_sec")
                two = metric(s, "mend-2-workers", "/ok", conns, "requests_per_sec")
                rows.append([str(conns), fmt_rps(one), fmt_rps(two), fmt_ratio(ratio(two, one))])
            out += table(["conns", "1 worker req/s", "2 workers req/s", "2/1"], rows)
        else:
            out.append(f"not available: {workers.get('reason')}")
        out.append("")
    return out


def instructions_section(results: dict[str, Any]) -> list[str]:
    found = results.get("instructions")
    if not found:
        return []
    out = ["### Instructions per request (callgrind; the same on every run)", ""]
    if not found.get("available"):
        return [*out, f"not available: {found.get('reason')}", ""]
    base = found["baseline"]
    per = found["per_request"]
    floor = per.get("bare-edge") or {}  # the bare proxy on mend's own edge, when it was run
    rows = []
    for path, mend in (per.get("mend") or {}).items():
        bare = (per.get(base) or {}).get(path)
        row = [
            f"`{path}`",
            f"{mend / 1000:,.0f} k",
            f"{bare / 1000:,.0f} k" if bare else "—",
            fmt_ratio(ratio(bare, mend)),
        ]
        if floor:
            edge = floor.get(path)
            row.append(f"{edge / 1000:,.0f} k" if edge else "—")
        rows.append(row)
    names = ["path", "mend", base, f"{base}/mend"]
    out += table([*names, "bare-edge"] if floor else names, rows)
    out += [
        "",
        f"`{base}/mend` is what the req/s ratio would be if both were bound by instructions "
        "alone; system calls and memory stalls (not counted) move the wall-clock ratio from it.",
        "",
    ]
    return out


def retries_section(results: dict[str, Any]) -> list[str]:
    """The retry policy's cost (issue 41): instructions per request with retries on and off."""
    found = results.get("retries")
    if not found:
        return []
    out = ["### Retries (instructions per request, callgrind, one connection)", ""]
    if not found.get("available"):
        return [*out, f"not available: {found.get('reason')}", ""]
    per = found["per_request"]
    made = found.get("retries_per_request") or {}
    status = found.get("status") or {}
    on, off = per.get("retries on") or {}, per.get("retries off") or {}

    def k(value: float | None) -> str:
        return f"{value / 1000:,.0f} k" if value else "—"

    def delta(a: float | None, b: float | None) -> str:
        if not a or not b:
            return "—"
        return f"{(a - b) / 1000:+,.0f} k ({(a - b) / b * 100:+.1f} %)"

    rows = []
    for path in sorted(set(on) | set(off), key=["/ok", "/flaky", "/err503"].index):
        rows.append(
            [
                f"`{path}`",
                k(on.get(path)),
                f"{(made.get('retries on') or {}).get(path, 0):.2f}",
                str((status.get("retries on") or {}).get(path, "—")),
                k(off.get(path)),
                str((status.get("retries off") or {}).get(path, "—")),
                delta(on.get(path), off.get(path)),
            ]
        )
    out += table(
        ["path", "retries on", "retries / request", "status", "retries off", "status", "on - off"],
        rows,
    )
    retried = delta(on.get("/flaky"), off.get("/err503"))
    out += [
        "",
        "`/flaky` answers 503, then 200: with retries on every request is a 503 retried into a "
        f"200; against `/err503` answered at once (retries off): {retried}.",
        "",
    ]
    return out


#: issue 43's targets: (figure, how mend/bare compares, the bound); start-up is absolute seconds
FOOTPRINT_INSTRUCTION_TARGETS = {
    "/ok": 0.8,
    "/err500-fresh": 1.5,
    "/err422-fresh": 1.5,
    "/err429-fresh": 1.5,
}
FOOTPRINT_RSS_TARGET = 1.25
FOOTPRINT_STARTUP_TARGET_S = 0.5


def _met(ok: bool | None) -> str:
    return "n/a" if ok is None else ("met" if ok else "**not met**")


def _figure(
    figure: str, mend: float | None, bare: float | None, bound: float | None, kind: str
) -> dict[str, Any]:
    """One row of the footprint table; ``kind``: ``ratio`` (mend/bare ≤ bound), ``seconds``
    (mend ≤ bound seconds) or ``context`` (no target)."""
    r = ratio(mend, bare)
    ok: bool | None = None
    if kind == "ratio" and r is not None and bound is not None:
        ok = r <= bound
    elif kind == "seconds" and mend is not None and bound is not None:
        ok = mend <= bound
    return {
        "figure": figure,
        "mend": mend,
        "bare": bare,
        "ratio": r,
        "target": bound,
        "kind": kind,
        "met": ok,
    }


def footprint_figures(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Issue 43's four figures (and the start-up's context), mend against its baseline."""
    found = results.get("footprint") or {}
    base = found.get("baseline") or "bare"
    rows: list[dict[str, Any]] = []
    memory = found.get("memory") or {}
    if memory:
        rows.append(
            _figure(
                f"RSS after {(memory.get('mend') or {}).get('requests', 1000):,} `GET /ok` "
                "(median of 3 fresh processes)",
                (memory.get("mend") or {}).get("median_after_rss"),
                (memory.get(base) or {}).get("median_after_rss"),
                FOOTPRINT_RSS_TARGET,
                "ratio",
            )
        )
        rows.append(
            _figure(
                "RSS at ready (context)",
                (memory.get("mend") or {}).get("median_ready_rss"),
                (memory.get(base) or {}).get("median_ready_rss"),
                None,
                "context",
            )
        )
    rows += _startup_figures(found.get("startup") or {}, base)
    per = (found.get("instructions") or {}).get("per_request") or {}
    for path, bound in FOOTPRINT_INSTRUCTION_TARGETS.items():
        mend = (per.get("mend") or {}).get(path)
        if mend is not None:
            rows.append(
                _figure(
                    f"instructions per request, `{path}`",
                    mend,
                    (per.get(base) or {}).get(path),
                    bound,
                    "ratio",
                )
            )
    return rows


def _startup_figures(startup: dict[str, Any], base: str) -> list[dict[str, Any]]:
    if not startup:
        return []

    def median(name: str, key: str) -> float | None:
        value = ((startup.get(name) or {}).get(key) or {}).get("median")
        return None if value is None else float(value)

    bare_ok = median(base, "ok_s")
    return [
        _figure(
            "start-up: exec to first 200 from `/readyz` (bare: `GET /ok`), median of 5",
            median("mend", "readyz_s"),
            bare_ok,
            FOOTPRINT_STARTUP_TARGET_S,
            "seconds",
        ),
        _figure(
            "start-up: exec to first 200 of `GET /ok` through the listener",
            median("mend", "ok_s"),
            bare_ok,
            None,
            "context",
        ),
        _figure(
            "start-up: CPU seconds (utime + stime) at ready",
            median("mend", "cpu_s"),
            median(base, "cpu_s"),
            None,
            "context",
        ),
    ]


def _fmt_figure(row: dict[str, Any], value: float | None) -> str:
    if value is None:
        return "-"
    figure = row["figure"]
    if figure.startswith("RSS"):
        return fmt_mib(value)
    if figure.startswith("start-up"):
        return f"{value * 1000:,.0f} ms"
    return f"{value / 1000:,.0f} k"


def _fmt_target(row: dict[str, Any]) -> str:
    if row["target"] is None:
        return "—"
    if row["kind"] == "seconds":
        return f"mend ≤ {row['target']} s"
    return f"≤ {row['target']}x"


def footprint_section(results: dict[str, Any]) -> list[str]:
    found = results.get("footprint")
    if not found:
        return []
    base = found.get("baseline") or "bare"
    py = found.get("python") or {}
    out = ["### Footprint (issue 43)", ""]
    out.append(
        f"mend vs `{base}` (the bare proxy on mend's event loop, "
        f"{found.get('mend_event_loop', '?')}), both under `{py.get('venv')}` "
        f"(Python {py.get('version', '?')}, {py.get('real', py.get('executable', '?'))})"
        + (f"; **{py['note']}**" if py.get("note") else "")
        + "; error bodies differ per request."
    )
    out.append("")
    rows = [
        [
            r["figure"],
            _fmt_figure(r, r["mend"]),
            _fmt_figure(r, r["bare"]),
            fmt_ratio(r["ratio"]),
            _fmt_target(r),
            "—" if r["kind"] == "context" else _met(r["met"]),
        ]
        for r in footprint_figures(results)
    ]
    out += table(["figure", "mend", base, "mend/bare", "target", "verdict"], rows)
    instructions = found.get("instructions") or {}
    if instructions and not instructions.get("available"):
        out += ["", f"instructions not available: {instructions.get('reason')}"]
    load = found.get("loadavg") or {}
    if load:
        seen = "; ".join(f"{k.replace('_', ' ')} {' '.join(map(str, v))}" for k, v in load.items())
        out += ["", f"load average (1, 5, 15 min) during the section: {seen}."]
    return [*out, ""]


def targets(results: dict[str, Any]) -> list[list[str]]:
    """The issue's targets, each with the worst measured cell and a verdict."""
    rows: list[list[str]] = []
    summary = results.get("summary") or {}
    base = baseline_of(results)

    def verdict(ok: bool | None) -> str:
        return "n/a" if ok is None else ("met" if ok else "**missed**")

    def worst(
        paths: Iterable[str], conns: Iterable[int], key: str, invert: bool = False
    ) -> tuple[float | None, str]:
        found: list[tuple[float, str]] = []
        for path in paths:
            for c in conns:
                r = ratio(
                    metric(summary, "mend", path, c, key), metric(summary, base, path, c, key)
                )
                if r is not None:
                    found.append((r, f"`{path}` c={c}"))
        if not found:
            return None, ""
        return max(found) if invert else min(found)

    r, where = worst(SUCCESS_PATHS, (32, 128), "requests_per_sec")
    rows.append(
        [
            "success path req/s, mend ≥ 0.95x bare at 32/128 conns",
            f"{fmt_ratio(r)} {where}".rstrip(),
            verdict(None if r is None else r >= 0.95),
        ]
    )
    r, where = worst(SUCCESS_PATHS, (1,), "p50_us", invert=True)
    rows.append(
        [
            "success path p50 at 1 conn, mend ≤ 1.1x bare",
            f"{fmt_ratio(r)} {where}".rstrip(),
            verdict(None if r is None else r <= 1.1),
        ]
    )
    r, where = worst(ERROR_PATHS, (1, 32, 128), "requests_per_sec")
    rows.append(
        [
            "error path req/s, mend (rewriting) ≥ 0.8x bare (passing through)",
            f"{fmt_ratio(r)} {where}".rstrip(),
            verdict(None if r is None else r >= 0.8),
        ]
    )
    rules = (results.get("rules") or {}).get("summary") or {}
    if rules:
        costs = []
        for c in _conns(rules):
            small = rules.get("mend-10-rules", {}).get("/err500", {}).get(str(c), {})
            big = rules.get("mend-1000-rules", {}).get("/err500", {}).get(str(c), {})
            if small and big:
                costs.append(ratio(big["p50_us"], small["p50_us"]) or 0.0)
                costs.append(ratio(small["requests_per_sec"], big["requests_per_sec"]) or 0.0)
        worst_cost = max(costs) if costs else None
        rows.append(
            [
                "1,000 rules cost ≤ 1.2x of 10 rules (p50 and req/s)",
                fmt_ratio(worst_cost),
                verdict(None if worst_cost is None else worst_cost <= 1.2),
            ]
        )
    else:
        rows.append(["1,000 rules cost ≤ 1.2x of 10 rules", "not measured", "n/a"])
    growth = ((results.get("stream") or {}).get("mend") or {}).get("growth")
    rows.append(
        [
            "memory growth streaming 1 GiB through mend < 20 MB",
            fmt_mib(growth),
            verdict(None if growth is None else growth < 20e6),
        ]
    )
    workers = results.get("workers") or {}
    if workers.get("available"):
        s = workers["summary"]
        r = min(
            (
                ratio(
                    metric(s, "mend-2-workers", "/ok", c, "requests_per_sec"),
                    metric(s, "mend-1-worker", "/ok", c, "requests_per_sec"),
                )
                or 0.0
            )
            for c in _conns(s)
        )
        rows.append(["`--workers 2` ≥ 1.7x one worker", fmt_ratio(r), verdict(r >= 1.7)])
    else:
        rows.append(
            [
                "`--workers 2` ≥ 1.7x one worker",
                f"not available ({workers.get('reason', 'not measured')})",
                "n/a",
            ]
        )
    return rows


def header(results: dict[str, Any]) -> list[str]:
    meta = results.get("meta", {})
    opts = meta.get("options", {})

    def py(info: dict[str, Any] | None) -> str:
        if not info:
            return "-"
        if "error" in info:
            return f"{info.get('executable')} (unusable: {info['error'][:60]})"
        return f"{info['version']} ({info['real']})"

    return [
        f"Run {meta.get('date', '?')}" + (f" — **{meta['label']}**" if meta.get("label") else ""),
        "",
        f"- machine: {meta.get('nproc')} CPUs, {meta.get('cpu_model')}, "
        f"kernel {meta.get('kernel')}; nginx {meta.get('nginx')}; {meta.get('wrk')}",
        f"- python under test: {py(meta.get('python_under_test'))}; "
        f"`python3` on PATH: {py(meta.get('python3_on_path'))}; "
        f"Debian venv: {py(meta.get('python_debian_venv'))}",
        f"- {opts.get('repeats')} repeat(s) x {opts.get('duration_s')} s per cell, medians; "
        f"warm-up {opts.get('warmup_s')} s; pinning: {opts.get('pinning')}; "
        f"wall time {meta.get('wall_seconds')} s",
    ]


def render(results: dict[str, Any]) -> str:
    out = [*header(results), ""]
    out += ["### Targets", ""]
    if (results.get("summary") or {}).get("mend"):
        out += [f'"bare" in the targets means `{baseline_of(results)}`.', ""]
    out += [*table(["target", "worst measured", "verdict"], targets(results)), ""]
    out += [*matrix_section(results), ""]
    out += [*rules_section(results), ""]
    out += other_section(results)
    out += instructions_section(results)
    out += retries_section(results)
    out += footprint_section(results)
    checks = results.get("checks") or {}
    codes = {
        f"{path} → {c['code']} ({c['rule']})"
        for path, c in (checks.get("mend") or {}).items()
        if "code" in c
    }
    if codes:
        out += ["mend's envelopes in this run: " + "; ".join(sorted(codes)), ""]
    if results.get("failed"):
        out += ["Failed sections:", ""]
        out += [f"- {name}: see notes and the results JSON" for name in results["failed"]]
        out.append("")
    if results.get("notes"):
        out += ["Notes:", "", *(f"- {n}" for n in results["notes"]), ""]
    return "\n".join(out).rstrip() + "\n"


def update_readme(readme: Path, markdown: str) -> None:
    text = readme.read_text()
    start, end = text.find(START), text.find(END)
    if start < 0 or end < start:
        raise ValueError(f"{readme} has no {START} ... {END} section")
    readme.write_text(text[: start + len(START)] + "\n\n" + markdown + "\n" + text[end:])
