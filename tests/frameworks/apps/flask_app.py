"""Flask with webargs and Flask-Limiter. ``python flask_app.py PORT [debug]``.

The error handlers are the ones the Flask and webargs docs give: HTTP errors as JSON
(``code``/``name``/``description``) and webargs' 422 as ``{"errors": messages}``. In debug mode the
Werkzeug debugger answers unhandled exceptions with its traceback page.
"""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime, timedelta
from typing import Any

from flask import Flask, abort, jsonify, request
from flask_limiter import Limiter
from flask_limiter.util import get_remote_address
from webargs import fields, validate
from webargs.flaskparser import use_args
from werkzeug.exceptions import HTTPException
from werkzeug.serving import run_simple
from werkzeug.wrappers import Response

SECRET = "postgres://orders:Pl4ntedSecret@db.internal:5432/orders"

ORDER = {
    "customer": fields.Nested({"name": fields.Str(required=True), "email": fields.Email()}),
    "items": fields.List(
        fields.Nested(
            {"sku": fields.Str(required=True), "qty": fields.Int(validate=validate.Range(min=1))}
        )
    ),
}


def build(debug: bool) -> Flask:
    app = Flask(__name__)
    app.config["MAX_CONTENT_LENGTH"] = 1024
    limiter = Limiter(get_remote_address, app=app, headers_enabled=True, storage_uri="memory://")

    @app.errorhandler(422)
    @app.errorhandler(400)
    def validation_error(err: Any) -> Any:
        messages = getattr(err, "data", {}).get("messages")
        if messages is None:
            return http_error(err)
        return jsonify({"errors": messages}), err.code

    @app.errorhandler(HTTPException)
    def http_error(err: HTTPException) -> Response:
        response = err.get_response()
        response.data = json.dumps(
            {"code": err.code, "name": err.name, "description": err.description}
        )
        response.content_type = "application/json"
        return response

    @app.post("/orders")
    @use_args(ORDER, location="json")
    def create_order(args: dict[str, Any]) -> Any:
        return {"ok": True}

    @app.get("/orders")
    @use_args({"limit": fields.Int(validate=validate.Range(max=100))}, location="query")
    def list_orders(args: dict[str, Any]) -> Any:
        return []

    @app.get("/orders/<int:order_id>")
    def get_order(order_id: int) -> Any:
        abort(404, description=f"Order {order_id} does not exist.")

    @app.get("/me")
    def me() -> Any:
        abort(401, description="Bad credentials")

    @app.delete("/orders/<int:order_id>")
    def delete_order(order_id: int) -> Any:
        abort(403, description="Only administrators may delete orders.")

    @app.post("/upload")
    def upload() -> Any:
        return {"size": len(request.get_data())}

    @app.get("/search")
    @limiter.limit("1/minute")
    def search() -> Any:
        return []

    @app.get("/status")
    def maintenance() -> Any:
        abort(503, retry_after=datetime.now(UTC) + timedelta(seconds=120))

    @app.get("/report")
    def report() -> Any:
        raise RuntimeError(f"cannot reach {SECRET}")

    return app


if __name__ == "__main__":
    debug = "debug" in sys.argv[2:]
    run_simple("127.0.0.1", int(sys.argv[1]), build(debug), use_debugger=debug, use_reloader=False)
