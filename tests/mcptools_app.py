"""A legacy REST API with an OpenAPI 3.1 document (FastAPI's), for ``mcp_tools``.

It fails the ways legacy APIs do, through FastAPI's own machinery: ``404`` for an unknown item,
``409`` for a name taken, a ``500`` whose plain-text body carries a Python traceback and a
database DSN (``/items/{item_id}/report``), and an answer that takes ``SLOW_S`` seconds
(``/items/{item_id}/history``). ``hits`` counts the requests that reached it.
"""

# No ``from __future__ import annotations``: FastAPI reads the parameters' annotations at runtime.
import asyncio
from enum import StrEnum
from typing import Annotated

from fastapi import FastAPI, HTTPException, Path, Query
from fastapi.responses import PlainTextResponse
from pydantic import BaseModel, Field

SLOW_S = 3.0
DSN = "postgres://inventory:Sup3rSecretPw@db-7.internal.corp:5432/inventory"
TRACE = (
    "Traceback (most recent call last):\n"
    '  File "/srv/inventory/app/reports.py", line 88, in build_report\n'
    "    rows = conn.execute(query)\n"
    f"sqlalchemy.exc.OperationalError: could not connect to {DSN}\n"
)


class Priority(StrEnum):
    low = "low"
    high = "high"


class NewItem(BaseModel):
    name: str = Field(pattern=r"^[a-z][a-z0-9-]{1,30}$", description="lowercase slug")
    priority: Priority
    qty: int = Field(ge=1, le=1000)


class Item(NewItem):
    id: int


def build() -> tuple[FastAPI, dict[str, int]]:
    """The app and its request counter."""
    app = FastAPI(title="inventory", version="1.0.0")
    items: dict[int, Item] = {1: Item(id=1, name="bolts", priority=Priority.low, qty=5)}
    hits = {"count": 0}

    @app.middleware("http")
    async def count(request, call_next):  # type: ignore[no-untyped-def]
        hits["count"] += 1
        return await call_next(request)

    @app.get("/items/{item_id}", operation_id="get_item", summary="Read one item")
    def get_item(item_id: Annotated[int, Path(ge=1)]) -> Item:
        if item_id not in items:
            raise HTTPException(status_code=404, detail=f"Item {item_id} not found")
        return items[item_id]

    @app.get("/items", operation_id="list_items", summary="List items")
    def list_items(limit: Annotated[int, Query(ge=1, le=50)] = 10) -> list[Item]:
        return list(items.values())[:limit]

    @app.post("/items", operation_id="create_item", summary="Create an item", status_code=201)
    def create_item(new: NewItem) -> Item:
        if any(i.name == new.name for i in items.values()):
            raise HTTPException(status_code=409, detail=f"An item named {new.name} exists")
        item = Item(id=max(items) + 1, **new.model_dump())
        items[item.id] = item
        return item

    @app.delete("/items/{item_id}", operation_id="delete_item", status_code=204)
    def delete_item(item_id: int) -> None:
        items.pop(item_id, None)

    @app.get(
        "/items/{item_id}/report",
        operation_id="item_report",
        summary="Build an item's stock report",
        response_class=PlainTextResponse,
    )
    def report(item_id: int) -> PlainTextResponse:
        return PlainTextResponse(TRACE, status_code=500)

    @app.get("/items/{item_id}/history", operation_id="item_history", summary="An item's history")
    async def history(item_id: int) -> list[str]:
        await asyncio.sleep(SLOW_S)
        return []

    return app, hits
