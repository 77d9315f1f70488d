# mend, plus the demo (legacy API and agent) so that docker-compose.yml needs one image.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app

COPY pyproject.toml README.md ./
COPY proxy ./proxy
# Editable: mend finds its default rule packs at rules/ beside the proxy package
# (settings.PACKAGED_RULES), which a regular install into site-packages would leave behind.
RUN pip install -e ".[speed]"

COPY rules ./rules
# demo/ (legacy API, agent) runs as `python -m demo.…` from the working directory.
COPY demo ./demo

RUN useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin mend
USER mend

EXPOSE 8080 9464

# slim has no curl; the admin port's /healthz answers 200 while the process serves.
HEALTHCHECK --interval=10s --timeout=3s --start-period=5s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:9464/healthz', timeout=2)"]

ENTRYPOINT ["mend"]
CMD ["run", "--upstream", "http://legacy-api:9000", "--listen", "0.0.0.0:8080", "--admin-listen", "0.0.0.0:9464"]
