"""mend: a sidecar reverse proxy that turns legacy API errors into one agent-readable envelope."""

__version__ = "0.1.0"
