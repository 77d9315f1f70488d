"""A Flask app failing its own way, for the admin page's tests (issue 40).

``python -m tests.runtime.cockpit_flask_app PORT`` serves, on werkzeug:
- ``POST /shipments``: 409 ``{"outcome": "HELD", "narrative": ..., "auth": ...}`` (keys no pack
  reads; ``auth`` a planted secret), with CORS and ``X-Api-Key`` headers that carry another.
"""

from __future__ import annotations

import sys

from flask import Flask, Response, jsonify

HEADER_SECRET = "ghp_plantedHeaderSecret0123456789abcdefAB"
BODY_SECRET = "xoxb-planted-body-secret-1234567890"

app = Flask(__name__)


@app.post("/shipments")
def shipments() -> tuple[Response, int, dict[str, str]]:
    body = {
        "outcome": "HELD",
        "narrative": "shipment is held at customs until the papers are filed",
        "auth": BODY_SECRET,
    }
    return jsonify(body), 409, {"X-Debug-Token": HEADER_SECRET}


if __name__ == "__main__":
    app.run(host="127.0.0.1", port=int(sys.argv[1]))
