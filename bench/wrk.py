"""Parse the text wrk 4.x prints with ``--latency``.

wrk has no machine-readable output without a Lua script, and a script would add per-request
work inside the load generator; reading its summary text keeps the generator as cheap as it is.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

# wrk's format_time() picks the largest unit that keeps the value >= 1.
_TIME_UNITS_US = {"us": 1.0, "ms": 1_000.0, "s": 1_000_000.0, "m": 60_000_000.0, "h": 3.6e9}
# wrk's format_metric() scales by 1000 for counts ("2.15k"); bytes use binary units ("KB").
_METRIC_SCALE = {"": 1.0, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}

_NUM = r"(\d+(?:\.\d+)?)"
_PERCENTILE = re.compile(rf"^\s*(\d+(?:\.\d+)?)%\s+{_NUM}\s*(us|ms|s|m|h)\s*$", re.MULTILINE)
_RPS = re.compile(rf"^Requests/sec:\s+{_NUM}\s*([kMGT]?)\s*$", re.MULTILINE)
_TOTAL = re.compile(rf"^\s*(\d+) requests in {_NUM}(us|ms|s|m|h),", re.MULTILINE)
_NON2XX = re.compile(r"^\s*Non-2xx or 3xx responses:\s+(\d+)\s*$", re.MULTILINE)
_SOCKET = re.compile(
    r"^\s*Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)\s*$", re.MULTILINE
)


@dataclass(frozen=True)
class WrkResult:
    requests_per_sec: float
    p50_us: float
    p99_us: float
    requests: int
    duration_s: float
    percentiles_us: dict[str, float] = field(default_factory=dict)
    non_2xx_3xx: int = 0
    socket_errors: dict[str, int] = field(default_factory=dict)

    @property
    def error_count(self) -> int:
        return sum(self.socket_errors.values())

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def parse_time_us(value: str, unit: str) -> float:
    try:
        return float(value) * _TIME_UNITS_US[unit]
    except KeyError:
        raise ValueError(f"unknown wrk time unit {unit!r}") from None


def parse_metric(value: str, suffix: str) -> float:
    try:
        return float(value) * _METRIC_SCALE[suffix]
    except KeyError:
        raise ValueError(f"unknown wrk metric suffix {suffix!r}") from None


def parse_wrk(text: str) -> WrkResult:
    """Return the numbers of one wrk run; ValueError when the text is not a complete summary."""
    percentiles = {
        _percent_key(m.group(1)): parse_time_us(m.group(2), m.group(3))
        for m in _PERCENTILE.finditer(text)
    }
    rps = _RPS.search(text)
    if rps is None:
        raise ValueError("no 'Requests/sec:' line in wrk output")
    if "50" not in percentiles or "99" not in percentiles:
        raise ValueError("no latency distribution in wrk output (was --latency given?)")
    total = _TOTAL.search(text)
    if total is None:
        raise ValueError("no 'N requests in T' line in wrk output")
    non2xx = _NON2XX.search(text)
    sock = _SOCKET.search(text)
    socket_errors = (
        dict(zip(("connect", "read", "write", "timeout"), map(int, sock.groups()), strict=True))
        if sock
        else {}
    )
    return WrkResult(
        requests_per_sec=parse_metric(rps.group(1), rps.group(2)),
        p50_us=percentiles["50"],
        p99_us=percentiles["99"],
        requests=int(total.group(1)),
        duration_s=parse_time_us(total.group(2), total.group(3)) / 1e6,
        percentiles_us=percentiles,
        non_2xx_3xx=int(non2xx.group(1)) if non2xx else 0,
        socket_errors=socket_errors,
    )


def _percent_key(raw: str) -> str:
    # "50.000" (wrk2-style) and "50" must land on the same key.
    number = float(raw)
    return str(int(number)) if number.is_integer() else str(number)
