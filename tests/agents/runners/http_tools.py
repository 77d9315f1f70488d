"""REST function tools: plain Python functions that call the REST app
(``tests/agents/rest_app.py``) with an HTTP client and give the model what the API answered.

Each REST runner (``rest_*_runner.py``) hands these functions to its framework as its own
function tools (pydantic-ai's ``tools=``, openai-agents' ``function_tool``, langchain's ``tool``
in langgraph's ``ToolNode``), in one of the two ways such tools are written (``STYLES``):

- ``text``: ``r = httpx.get(...); return r.text``: the model reads the body, whatever the
  status (no status, no headers);
- ``raise``: ``r.raise_for_status(); return r.json()``: on a failure the model reads what the
  framework makes of the exception (its text holds the status, its reason and the URL: httpx's
  ``Client error '404 Not Found' for url '...'``, requests' ``404 Client Error: Not Found for
  url: ...``), never the body or the headers.

``response`` (not a style a model sees) returns the response itself: the tests read the whole
answer on the wire with it. The client is ``httpx`` or ``requests`` (the one the framework's
environment holds); a tool's request is the same with either.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from typing import Any

STYLES = ("text", "raise")
#: the environment variable the harness sets to the style of a runner's tools
STYLE_VARIABLE = "REST_TOOL_STYLE"
TIMEOUT_S = 30.0

Failed = Callable[[Exception], Any]


def style() -> str:
    """The style the harness asked this runner for."""
    chosen = os.environ.get(STYLE_VARIABLE, "text")
    if chosen not in STYLES:
        raise SystemExit(f"{STYLE_VARIABLE}={chosen!r}: not one of {STYLES}")
    return chosen


def tools(
    base: str, chosen: str, client: str = "httpx", failed: Failed | None = None
) -> list[Callable[..., Any]]:
    """The shop's tools on the REST app at ``base``, ending the ``chosen`` way; ``failed``
    (``raise`` style) is where a framework that wants its own exception type gets the HTTP
    client's (pydantic-ai: ``ModelRetry``), as its users write ``except ... raise X(str(e))``."""
    http = importlib.import_module(client)

    def answer(r: Any) -> Any:
        if chosen == "response":
            return r
        if chosen == "raise":
            try:
                r.raise_for_status()
            except Exception as exc:
                if failed is None:
                    raise
                return failed(exc)
            return r.json()
        return r.text

    def get_order(order_id: str) -> Any:
        """Look an order up by its id."""
        return answer(http.get(f"{base}/orders/{order_id}", timeout=TIMEOUT_S))

    def cancel_order(order_id: str) -> Any:
        """Cancel an order."""
        return answer(http.post(f"{base}/orders/{order_id}/cancel", timeout=TIMEOUT_S))

    def create_product(name: str, quantity: int) -> Any:
        """Create a product, stocked with a quantity."""
        body = {"name": name, "quantity": quantity}
        return answer(http.post(f"{base}/products", json=body, timeout=TIMEOUT_S))

    def set_price(sku: str, price: float) -> Any:
        """Set the price of a product."""
        body = {"price": price}
        return answer(http.put(f"{base}/products/{sku}/price", json=body, timeout=TIMEOUT_S))

    def search_products(q: str) -> Any:
        """Search the catalogue."""
        params = {"q": q}
        return answer(http.get(f"{base}/products/search", params=params, timeout=TIMEOUT_S))

    def get_inventory(sku: str) -> Any:
        """Stock of a SKU."""
        return answer(http.get(f"{base}/inventory/{sku}", timeout=TIMEOUT_S))

    def export_report(month: str) -> Any:
        """Export a monthly report."""
        return answer(http.get(f"{base}/reports/{month}", timeout=TIMEOUT_S))

    return [
        get_order,
        cancel_order,
        create_product,
        set_price,
        search_products,
        get_inventory,
        export_report,
    ]
