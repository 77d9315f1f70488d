"""FastAPI (pydantic v2) with slowapi rate limits. ``python fastapi_app.py PORT [debug]``.

Every error comes from FastAPI, Starlette, pydantic or slowapi themselves: request validation,
``HTTPException``, the security dependencies, routing, and the server-error middleware.
"""

# No ``from __future__ import annotations``: FastAPI reads the parameters' annotations at
# runtime, and ``Depends(bearer)`` names a local of ``build``.
import sys
import time
from email.utils import formatdate
from typing import Annotated

import uvicorn
from fastapi import Depends, FastAPI, HTTPException, Query, Request, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, Field
from slowapi import Limiter, _rate_limit_exceeded_handler
from slowapi.errors import RateLimitExceeded
from slowapi.util import get_remote_address

SECRET = "postgres://orders:Pl4ntedSecret@db.internal:5432/orders"


class Customer(BaseModel):
    name: str
    email: str


class Item(BaseModel):
    sku: str
    qty: int = Field(ge=1)


class Order(BaseModel):
    customer: Customer
    items: list[Item]


def build(debug: bool) -> FastAPI:
    limiter = Limiter(key_func=get_remote_address, headers_enabled=True)
    app = FastAPI(debug=debug)
    app.state.limiter = limiter
    app.add_exception_handler(RateLimitExceeded, _rate_limit_exceeded_handler)  # type: ignore[arg-type]
    bearer = HTTPBearer()

    @app.post("/orders")
    def create_order(order: Order) -> dict[str, int]:
        return {"items": len(order.items)}

    @app.post("/orders/bulk")
    def bulk(items: list[Item]) -> dict[str, int]:
        return {"items": len(items)}

    @app.get("/orders")
    def list_orders(
        limit: int = Query(10, le=100), status: str = Query(pattern="^(open|closed)$")
    ) -> list[int]:
        return []

    @app.get("/orders/{order_id}")
    def get_order(order_id: int) -> dict[str, int]:
        raise HTTPException(status_code=404, detail=f"Order {order_id} not found")

    @app.get("/me")
    def me(creds: Annotated[HTTPAuthorizationCredentials, Depends(bearer)]) -> dict[str, str]:
        return {"token": creds.credentials}

    @app.delete("/orders/{order_id}")
    def delete_order(order_id: int) -> None:
        raise HTTPException(status_code=403, detail="Not enough permissions to delete orders")

    @app.get("/search")
    @limiter.limit("1/minute")
    def search(request: Request, response: Response) -> list[int]:
        return []

    @app.put("/items/{item_id}")
    def lock_item(item_id: int) -> None:
        raise HTTPException(
            status_code=409,
            detail={"error": "item_locked", "lock_holder": "job-7", "unlock_at": "in 5 minutes"},
        )

    @app.get("/status")
    def maintenance() -> None:
        until = formatdate(time.time() + 120, usegmt=True)
        raise HTTPException(503, "Down for maintenance", headers={"Retry-After": until})

    @app.get("/report")
    def report() -> None:
        raise RuntimeError(f"cannot reach {SECRET}")

    return app


if __name__ == "__main__":
    uvicorn.run(
        build("debug" in sys.argv[2:]), host="127.0.0.1", port=int(sys.argv[1]), log_level="warning"
    )
