"""The static upstream and the nginx reverse proxy used as the ceiling, both from Debian's nginx.

Each nginx gets its own generated config in the run's temp dir (pid, logs and temp paths
included), so nothing touches /etc/nginx or the system service.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path

BIG_SIZE = 2 * 1024 * 1024
HUGE_SIZE = 1024 * 1024 * 1024

OK_BODY = {"id": 42, "status": "ok", "items": [1, 2, 3], "message": "fine"}

# 422 the way FastAPI/pydantic v2 reports several invalid fields at once.
ERR422_BODY: dict[str, list[dict[str, object]]] = {
    "detail": [
        {
            "type": "greater_than",
            "loc": ["body", "qty"],
            "msg": "Input should be greater than 0",
            "input": -1,
            "ctx": {"gt": 0},
        },
        {
            "type": "missing",
            "loc": ["body", "customer_id"],
            "msg": "Field required",
            "input": {"qty": -1, "sku": "A-1"},
        },
        {
            "type": "string_too_short",
            "loc": ["body", "sku"],
            "msg": "String should have at least 3 characters",
            "input": "A",
            "ctx": {"min_length": 3},
        },
        {
            "type": "enum",
            "loc": ["query", "currency"],
            "msg": "Input should be 'EUR', 'USD' or 'GBP'",
            "input": "XYZ",
            "ctx": {"expected": "'EUR', 'USD' or 'GBP'"},
        },
    ]
}

ERR429_BODY = {"error": "rate limit exceeded", "limit": 100, "window": "1m"}

# 503 with no Retry-After: an overloaded replica (``/err503``, and ``/flaky``'s first answer)
ERR503_BODY = {"error": "service overloaded", "status": 503}

_FRAMES = [
    "at org.postgresql.core.v3.QueryExecutorImpl.receiveErrorResponse(QueryExecutorImpl.java:2676)",
    "at org.postgresql.core.v3.QueryExecutorImpl.processResults(QueryExecutorImpl.java:2366)",
    "at org.postgresql.core.v3.QueryExecutorImpl.execute(QueryExecutorImpl.java:356)",
    "at org.postgresql.jdbc.PgStatement.executeInternal(PgStatement.java:496)",
    "at com.zaxxer.hikari.pool.ProxyPreparedStatement.executeUpdate("
    "ProxyPreparedStatement.java:61)",
    "at org.hibernate.engine.jdbc.internal.ResultSetReturnImpl.executeUpdate("
    "ResultSetReturnImpl.java:197)",
    "at com.example.orders.OrderRepository.save(OrderRepository.java:88)",
    "at com.example.orders.OrderService.placeOrder(OrderService.java:142)",
    "at com.example.orders.OrderController.create(OrderController.java:57)",
    "at org.springframework.web.servlet.FrameworkServlet.service(FrameworkServlet.java:883)",
    "at org.apache.catalina.core.ApplicationFilterChain.doFilter(ApplicationFilterChain.java:166)",
    "at org.apache.tomcat.util.net.NioEndpoint.doRun(NioEndpoint.java:1791)",
]


#: where the ``-fresh`` paths put nginx's per-response variables (``_nginx_literal`` refuses ``$``)
FRESH = "FRESH-PER-RESPONSE"
FRESH_TIME = "FRESH-TIME"
#: nginx variables no two responses share: the time in ms and a random 32-hex id
FRESH_VALUE = "$msec-$request_id"


def err422_fresh_body() -> dict[str, object]:
    """The FastAPI 422 with values that differ per response, as a client's inputs do: the
    invalid currency and the body echoed for the missing field carry a per-response id."""
    detail = [dict(d) for d in ERR422_BODY["detail"]]
    detail[1]["input"] = {"qty": -1, "sku": "A-1", "order_ref": FRESH}
    detail[3]["input"] = FRESH
    return {"detail": detail}


def err429_fresh_body() -> dict[str, object]:
    """A rate limiter's 429 whose body names the request and the window's reset, per response."""
    return {**ERR429_BODY, "request_id": FRESH, "reset_at": FRESH_TIME}


#: the reset headers of ``/err429-fresh`` (IETF drafts and the X- variant); reset in seconds
ERR429_FRESH_HEADERS = {
    "Retry-After": "7",
    "RateLimit-Limit": "100",
    "RateLimit-Remaining": "0",
    "RateLimit-Reset": "7",
    "X-RateLimit-Limit": "100",
    "X-RateLimit-Remaining": "0",
    "X-RateLimit-Reset": "7",
    "X-Request-Id": "$request_id",
}


def err500_body(timestamp: str = "2026-11-22T04:05:06.789+00:00") -> dict[str, object]:
    """Spring Boot's error body with a ~2 KB stack trace (`server.error.include-stacktrace`)."""
    trace = (
        "org.springframework.dao.DataIntegrityViolationException: could not execute statement; "
        "SQL [n/a]; constraint [orders_customer_fk]\n\t"
        + "\n\t".join(_FRAMES)
        + "\nCaused by: org.postgresql.util.PSQLException: ERROR: insert or update on table "
        '"orders" violates foreign key constraint "orders_customer_fk"\n\t'
        + "\n\t".join(_FRAMES[:6])
    )
    return {
        "timestamp": timestamp,
        "status": 500,
        "error": "Internal Server Error",
        "trace": trace,
        "message": "could not execute statement; SQL [n/a]; constraint [orders_customer_fk]",
        "path": "/err500",
    }


def _nginx_literal(text: str) -> str:
    """Quote ``text`` for an nginx ``return`` directive; ``$`` cannot be escaped, only avoided."""
    if "$" in text:
        raise ValueError("nginx return text must not contain '$' (it starts a variable)")
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _common(tmp: Path, name: str) -> str:
    t = tmp / f"{name}-temp"
    t.mkdir(parents=True, exist_ok=True)
    # Workers would otherwise drop to `nobody` and fail to read the 0700 temp dir.
    user = "user root;\n" if os.geteuid() == 0 else ""
    return f"""daemon off;
{user}master_process on;
worker_processes 1;
pid {tmp}/{name}.pid;
error_log {tmp}/{name}-error.log warn;
events {{ worker_connections 8192; multi_accept on; }}
"""


def _http_common(tmp: Path, name: str) -> str:
    t = tmp / f"{name}-temp"
    return f"""    access_log off;
    client_body_temp_path {t}/body;
    proxy_temp_path {t}/proxy;
    fastcgi_temp_path {t}/fastcgi;
    uwsgi_temp_path {t}/uwsgi;
    scgi_temp_path {t}/scgi;
    keepalive_requests 100000000;
    keepalive_timeout 300s;
    tcp_nodelay on;
    server_tokens off;
    types {{ application/json json; application/octet-stream bin; }}
"""


def write_upstream_config(tmp: Path, port: int) -> Path:
    """Static upstream on 127.0.0.1:port; files under tmp/www. Returns the config path."""
    www = tmp / "www"
    www.mkdir(parents=True, exist_ok=True)
    big = www / "big.bin"
    if not big.exists() or big.stat().st_size != BIG_SIZE:
        big.write_bytes(random.Random(6).randbytes(BIG_SIZE))
    huge = www / "huge.bin"
    if not huge.exists():
        # Sparse: 1 GiB of zeros costs no disk and nginx sends it with sendfile.
        with huge.open("wb") as f:
            f.truncate(HUGE_SIZE)
    ok, e500, e422, e429, e503, fresh, fresh422, fresh429 = (
        _nginx_literal(json.dumps(body, separators=(",", ":")))
        for body in (
            OK_BODY,
            err500_body(),
            ERR422_BODY,
            ERR429_BODY,
            ERR503_BODY,
            err500_body(FRESH),
            err422_fresh_body(),
            err429_fresh_body(),
        )
    )
    # nginx fills these in per response: a timestamp and an id no two responses share
    fresh = fresh.replace(FRESH, "2026-11-22T04:05:$msec+00:00 $request_id")
    fresh422 = fresh422.replace(FRESH, FRESH_VALUE)
    fresh429 = fresh429.replace(FRESH, FRESH_VALUE).replace(FRESH_TIME, "$time_iso8601")
    headers429 = "".join(
        f"            add_header {name} {value} always;\n"
        for name, value in ERR429_FRESH_HEADERS.items()
    )
    # `return CODE text` keeps the connection alive; `return 500` + error_page would not,
    # because nginx closes keep-alive connections after its own 500 pages.
    # /flaky answers 503, then 200, then 503...: round robin over two servers of its own (one
    # worker, so the turns alternate across every connection), for a retry that succeeds.
    flaky = {code: tmp / f"flaky-{code}.sock" for code in (503, 200)}
    conf = (
        _common(tmp, "upstream")
        + f"""http {{
{_http_common(tmp, "upstream")}    sendfile on;
    tcp_nopush on;
    server {{
        listen 127.0.0.1:{port} backlog=4096 reuseport;
        root {www};
        location = /ok {{ default_type application/json; return 200 {ok}; }}
        location = /big {{ default_type application/octet-stream; alias {big}; }}
        location = /huge {{ default_type application/octet-stream; alias {huge}; }}
        location = /err500 {{ default_type application/json; return 500 {e500}; }}
        location = /err500-fresh {{ default_type application/json; return 500 {fresh}; }}
        location = /err422 {{ default_type application/json; return 422 {e422}; }}
        location = /err429 {{
            default_type application/json;
            add_header Retry-After 7 always;
            return 429 {e429};
        }}
        location = /err422-fresh {{ default_type application/json; return 422 {fresh422}; }}
        location = /err429-fresh {{
            default_type application/json;
{headers429}            return 429 {fresh429};
        }}
        location = /err503 {{ default_type application/json; return 503 {e503}; }}
        location = /flaky {{ proxy_pass http://flaky; }}
    }}
    upstream flaky {{ server unix:{flaky[503]}; server unix:{flaky[200]}; }}
    server {{
        listen unix:{flaky[503]};
        location / {{ default_type application/json; return 503 {e503}; }}
    }}
    server {{
        listen unix:{flaky[200]};
        location / {{ default_type application/json; return 200 {ok}; }}
    }}
}}
"""
    )
    path = tmp / "upstream.conf"
    path.write_text(conf)
    return path


def write_proxy_config(tmp: Path, port: int, upstream_port: int) -> Path:
    """nginx as a reverse proxy: keep-alive upstream pool, errors passed through untouched."""
    conf = (
        _common(tmp, "nginxproxy")
        + f"""http {{
{_http_common(tmp, "nginxproxy")}
    upstream up {{
        server 127.0.0.1:{upstream_port};
        keepalive 256;
    }}
    server {{
        listen 127.0.0.1:{port} backlog=4096 reuseport;
        location / {{
            proxy_pass http://up;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_intercept_errors off;
            # Stream large bodies through memory buffers, never via temp files on disk.
            proxy_max_temp_file_size 0;
            proxy_buffers 16 64k;
        }}
    }}
}}
"""
    )
    path = tmp / "nginxproxy.conf"
    path.write_text(conf)
    return path


def nginx_path() -> str | None:
    # Debian installs nginx in /usr/sbin, which is not on a non-root PATH.
    path = os.environ.get("PATH", "") + os.pathsep + "/usr/sbin"
    return shutil.which("nginx", path=path)


def nginx_cmd(conf: Path) -> list[str]:
    exe = nginx_path()
    if exe is None:
        raise FileNotFoundError("nginx not found (apt-get install -y nginx)")
    # -e: nginx opens its compiled-in error log before it reads the config; keep it in tmp.
    early_log = conf.parent / "nginx-early.log"
    return [exe, "-c", str(conf), "-p", str(conf.parent), "-e", str(early_log)]
