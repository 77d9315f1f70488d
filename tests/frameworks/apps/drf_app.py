"""Django REST Framework, configured in code (no project). ``python drf_app.py PORT [debug]``.

Serializers (nested, ``many=True``, a ``ListField`` of a serializer), query parameters through a
serializer, authentication, permissions, throttling, and Django's own 404 and 500 pages.
"""

from __future__ import annotations

import sys
from typing import Any

import django
from django.conf import settings

DEBUG = "debug" in sys.argv[2:]
SECRET = "postgres://orders:Pl4ntedSecret@db.internal:5432/orders"

settings.configure(
    DEBUG=DEBUG,
    SECRET_KEY="tests-frameworks-not-a-secret",
    ROOT_URLCONF=__name__,
    ALLOWED_HOSTS=["*"],
    INSTALLED_APPS=["django.contrib.contenttypes", "django.contrib.auth", "rest_framework"],
    DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}},
    MIDDLEWARE=["django.middleware.common.CommonMiddleware"],
    REST_FRAMEWORK={
        "DEFAULT_AUTHENTICATION_CLASSES": ["rest_framework.authentication.BasicAuthentication"],
        "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.AllowAny"],
        "DEFAULT_THROTTLE_RATES": {"anon": "1/min"},
    },
    LOGGING_CONFIG=None,
)
django.setup()

from django.urls import path  # noqa: E402
from rest_framework import permissions, serializers, throttling  # noqa: E402
from rest_framework.decorators import (  # noqa: E402
    api_view,
    authentication_classes,
    permission_classes,
    throttle_classes,
)
from rest_framework.exceptions import NotFound  # noqa: E402
from rest_framework.request import Request  # noqa: E402
from rest_framework.response import Response  # noqa: E402


class CustomerSerializer(serializers.Serializer[Any]):
    name = serializers.CharField()
    email = serializers.EmailField()


class ItemSerializer(serializers.Serializer[Any]):
    sku = serializers.CharField()
    qty = serializers.IntegerField(min_value=1)


class OrderSerializer(serializers.Serializer[Any]):
    customer = CustomerSerializer()
    items = ItemSerializer(many=True)


class CartSerializer(serializers.Serializer[Any]):
    items = serializers.ListField(child=ItemSerializer())
    tags = serializers.ListField(child=serializers.SlugField(), required=False)


class ListQuery(serializers.Serializer[Any]):
    limit = serializers.IntegerField(max_value=100, required=False)
    status = serializers.ChoiceField(choices=["open", "closed"], required=False)


@api_view(["POST"])
def orders(request: Request) -> Response:
    serializer = OrderSerializer(data=request.data)
    serializer.is_valid(raise_exception=True)
    return Response(serializer.data, status=201)


@api_view(["POST"])
def carts(request: Request) -> Response:
    serializer = CartSerializer(data=request.data)
    serializer.is_valid(raise_exception=True)
    return Response(serializer.data, status=201)


@api_view(["POST"])
def bulk(request: Request) -> Response:
    serializer = ItemSerializer(data=request.data, many=True)
    serializer.is_valid(raise_exception=True)
    return Response(serializer.data, status=201)


@api_view(["GET"])
def order_list(request: Request) -> Response:
    query = ListQuery(data=request.query_params)
    query.is_valid(raise_exception=True)
    return Response([])


@api_view(["GET", "PUT"])
def order_detail(request: Request, order_id: int) -> Response:
    raise NotFound()


@api_view(["GET"])
@permission_classes([permissions.IsAuthenticated])
def me(request: Request) -> Response:
    return Response({"user": str(request.user)})


@api_view(["DELETE"])
@authentication_classes([])
@permission_classes([permissions.IsAdminUser])
def purge(request: Request) -> Response:
    return Response(status=204)


@api_view(["GET"])
@throttle_classes([throttling.AnonRateThrottle])
def search(request: Request) -> Response:
    return Response([])


@api_view(["GET"])
def report(request: Request) -> Response:
    raise RuntimeError(f"cannot reach {SECRET}")


urlpatterns = [
    path("orders/", orders),
    path("orders/list/", order_list),
    path("orders/<int:order_id>/", order_detail),
    path("carts/", carts),
    path("items/bulk/", bulk),
    path("me/", me),
    path("purge/", purge),
    path("search/", search),
    path("report/", report),
]

if __name__ == "__main__":
    from wsgiref.simple_server import WSGIRequestHandler, make_server

    from django.core.wsgi import get_wsgi_application

    class Quiet(WSGIRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

    make_server(
        "127.0.0.1", int(sys.argv[1]), get_wsgi_application(), handler_class=Quiet
    ).serve_forever()
