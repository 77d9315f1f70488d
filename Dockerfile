# mend, plus the demo (legacy API and agent) so that docker-compose.yml and the Kubernetes example
# (deploy/kubernetes/) need one image.
#
# Two stages: the first builds mend's wheel from the same sources `pip install .` uses; the second
# installs that wheel (the shipped packs and their tests are package data inside it, see
# pyproject.toml) and holds no source tree. The image runs as a non-root numeric user and works
# with a read-only root filesystem: mend writes nothing but, with --workers > 1, the Prometheus
# multiprocess directory under $TMPDIR (/tmp), so give it a tmpfs there:
#   docker run --read-only --tmpfs /tmp -p 8080:8080 -p 9464:9464 mend:local run --upstream ...

FROM python:3.11-slim AS build

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /src
COPY pyproject.toml README.md ./
COPY proxy ./proxy
COPY rules ./rules
RUN pip wheel --no-deps --wheel-dir /dist .


FROM python:3.11-slim

# No .pyc written at run time (the root filesystem may be read-only); pip compiles the installed
# packages' bytecode when it installs them, below.
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

COPY --from=build /dist/ /tmp/dist/
# [tracing]: the OpenTelemetry SDK, so that OTEL_* variables turn traces on (docs/operations.md, Traces);
# mend imports it only when they do
RUN set -eu; \
    wheel="$(echo /tmp/dist/mend-*-py3-none-any.whl)"; \
    pip install "${wheel}[speed,tracing,mcp]"; \
    rm -rf /tmp/dist

# demo/ (legacy API, agent) runs as `python -m demo.…` from the working directory; mend itself
# comes from site-packages (there is no proxy/ here to shadow it).
WORKDIR /app
COPY demo ./demo
RUN python -m compileall -q demo

RUN groupadd --system --gid 10001 mend \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --shell /usr/sbin/nologin mend
# numeric, so that Kubernetes' runAsNonRoot can check it without reading /etc/passwd
USER 10001:10001

EXPOSE 8080 9464

# slim has no curl; the admin port's /healthz answers 200 while the process serves.
HEALTHCHECK --interval=10s --timeout=3s --start-period=5s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:9464/healthz', timeout=2)"]

ENTRYPOINT ["mend"]
CMD ["run", "--upstream", "http://legacy-api:9000", "--listen", "0.0.0.0:8080", "--admin-listen", "0.0.0.0:9464"]
