"""Strawberry GraphQL over ASGI (uvicorn). ``python strawberry_app.py PORT``.

Variable coercion (type and enum), a missing required variable, an unknown field, and a
permission class refusing a field: all reported by graphql-core and Strawberry themselves.
"""

from __future__ import annotations

import enum
import sys
from typing import Any

import strawberry
import uvicorn
from strawberry.asgi import GraphQL
from strawberry.permission import BasePermission


@strawberry.enum
class OrderStatus(enum.Enum):
    OPEN = "open"
    SHIPPED = "shipped"


@strawberry.input
class ItemInput:
    sku: str
    qty: int


class IsAuthenticated(BasePermission):
    message = "User is not authenticated"

    def has_permission(self, source: Any, info: strawberry.Info, **kwargs: Any) -> bool:
        return bool(info.context["request"].headers.get("authorization"))


@strawberry.type
class Query:
    @strawberry.field
    def orders(self, status: OrderStatus, limit: int = 10) -> list[int]:
        return []

    @strawberry.field(permission_classes=[IsAuthenticated])
    def me(self) -> str:
        return "someone"


@strawberry.type
class Mutation:
    @strawberry.mutation
    def add_items(self, items: list[ItemInput]) -> int:
        return len(items)


app = GraphQL(strawberry.Schema(query=Query, mutation=Mutation), graphql_ide=None)

if __name__ == "__main__":
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
