"""A small REST API that fails through FastAPI's own machinery, for FastMCP's OpenAPI tools.

Its operation ids name the tools ``FastMCP.from_openapi`` generates from it
(``tests/agents/openapi_server.py``): a missing order (404), a state conflict (409), a body
FastAPI's validation refuses (422, its ``detail`` list), a rate limit (429 with ``Retry-After``),
a database that is down (503). The REST function tools (``tests/agents/runners/rest_tools.py``)
call it too, and two more: a price FastAPI's ``Field(gt=0)`` refuses (422) and a report export
that fails with a traceback and a connection string in its text (500).
``python -m tests.agents.rest_app PORT`` serves it.
"""

from __future__ import annotations

import sys
from typing import Annotated

import uvicorn
from fastapi import FastAPI, HTTPException
from fastapi.responses import JSONResponse, PlainTextResponse
from pydantic import AfterValidator, BaseModel, Field

from tests.agents.servers import SECRET, TRACE


def in_sixes(quantity: int) -> int:
    """Products are sold in boxes of six."""
    if quantity % 6:
        raise ValueError("quantity must be a multiple of 6")
    return quantity


class Product(BaseModel):
    name: str
    quantity: Annotated[int, AfterValidator(in_sixes)]


class Price(BaseModel):
    price: Annotated[float, Field(gt=0)]


app = FastAPI(title="shop-rest")


@app.get("/orders/{order_id}", operation_id="get_order")
def get_order(order_id: str) -> dict[str, str]:
    raise HTTPException(404, f"Order {order_id} not found")


@app.post("/orders/{order_id}/cancel", operation_id="cancel_order")
def cancel_order(order_id: str) -> dict[str, str]:
    raise HTTPException(409, f"Order {order_id} cannot be cancelled: it has already shipped")


@app.post("/products", operation_id="create_product")
def create_product(product: Product) -> dict[str, str]:
    return {"name": product.name}


@app.get("/products/search", operation_id="search_products", response_model=None)
def search_products(q: str) -> JSONResponse:
    detail = {"detail": "Rate limit exceeded: 10 per 1 minute"}
    return JSONResponse(detail, status_code=429, headers={"Retry-After": "7"})


@app.get("/inventory/{sku}", operation_id="get_inventory", response_model=None)
def get_inventory(sku: str) -> JSONResponse:
    return JSONResponse({"detail": "Inventory database is unavailable"}, status_code=503)


@app.put("/products/{sku}/price", operation_id="set_price")
def set_price(sku: str, price: Price) -> dict[str, float]:
    return {"price": price.price}


@app.get("/reports/{month}", operation_id="export_report", response_model=None)
def export_report(month: str) -> PlainTextResponse:
    """What a server that answers its exceptions' tracebacks sends (a debug mode left on)."""
    return PlainTextResponse(f"export failed: could not write to {SECRET}\n{TRACE}", 500)


if __name__ == "__main__":
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
