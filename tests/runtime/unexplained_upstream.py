"""An API failing in ways no shipped pack knows, for the unexplained-shapes tests (issue 40).

``python -m tests.runtime.unexplained_upstream PORT`` serves, on aiohttp:
- ``POST /orders``: 422 ``{"result": "E_QTY_RANGE", "explanation": ..., "offending_param": "qty",
  "token": ...}`` (keys of its own, which no pack reads; ``token`` a planted secret);
- ``GET /invoices/{n}``: 500, an HTML page titled "Invoice <n> could not be rendered" whose body
  holds a planted password;
- ``GET /search``: FastAPI's 422 ``{"detail": [...]}``, which the fastapi pack explains.
"""

from __future__ import annotations

import sys

from aiohttp import web

SECRET = "sk_live_4eC39HqLyjWDarjtT1zdp7dc"
PASSWORD = "hunter2-planted"


async def orders(_: web.Request) -> web.Response:
    body = {
        "result": "E_QTY_RANGE",
        "explanation": "qty must be between 1 and 99",
        "offending_param": "qty",
        "token": SECRET,
    }
    return web.json_response(body, status=422)


async def invoice(request: web.Request) -> web.Response:
    number = request.match_info["n"]
    page = (
        f"<html><head><title>Invoice {number} could not be rendered</title></head>"
        f"<body>db password={PASSWORD} at /srv/billing/render.py</body></html>"
    )
    return web.Response(text=page, status=500, content_type="text/html")


async def search(_: web.Request) -> web.Response:
    problem = {
        "type": "less_than_equal",
        "loc": ["query", "limit"],
        "msg": "Input should be less than or equal to 100",
        "input": "500",
        "ctx": {"le": 100},
    }
    return web.json_response({"detail": [problem]}, status=422)


def main() -> None:
    app = web.Application()
    app.router.add_post("/orders", orders)
    app.router.add_get("/invoices/{n}", invoice)
    app.router.add_get("/search", search)
    web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None)


if __name__ == "__main__":
    main()
