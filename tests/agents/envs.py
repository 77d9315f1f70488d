"""Each agent framework in a virtualenv of its own, beside the main one, created on first use.

The frameworks pin what the main virtualenv cannot hold at once (SDK 1.x and 2.x of ``mcp``,
``openai``, ``google-genai``, ``langchain-core``, ``llama-index-core``), so each gets
``<sys.prefix>/agents/<name>``: ``python -m venv`` then ``pip install`` of its pinned
releases, once (a marker file holds the spec it was installed with; a changed spec reinstalls).
pydantic-ai is in the main virtualenv already.
"""

from __future__ import annotations

import fcntl
import subprocess
import sys
from pathlib import Path

#: framework -> the releases its environment holds (the current ones when this was written)
SPECS: dict[str, tuple[str, ...]] = {
    "openai-agents": ("openai-agents==0.24.0",),
    "langgraph": ("langchain-mcp-adapters==0.3.2", "langgraph==1.2.24"),
    "google-adk": ("google-adk[mcp]==2.13.0",),
    "llama-index": ("llama-index-tools-mcp==0.6.0",),
    # the Client, and the OpenAPI server generated from the failing REST app
    "fastmcp": ("fastmcp==4.2.3", "uvicorn>=0.30"),
}
INSTALL_TIMEOUT_S = 900
MARKER = ".mend-installed"


def root() -> Path:
    return Path(sys.prefix) / "agents"


def python(name: str) -> Path:
    """The interpreter of framework ``name``'s environment, installed on first use."""
    if name == "pydantic-ai":
        return Path(sys.executable)
    spec = "\n".join(SPECS[name])
    env = root() / name
    marker = env / MARKER
    interpreter = env / "bin" / "python"
    root().mkdir(parents=True, exist_ok=True)
    with (root() / f".{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two test runs at once install once
        if marker.exists() and marker.read_text() == spec and interpreter.exists():
            return interpreter
        if not interpreter.exists():
            subprocess.run([sys.executable, "-m", "venv", str(env)], check=True, timeout=120)
        pip = [str(interpreter), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
        subprocess.run([*pip, *SPECS[name]], check=True, timeout=INSTALL_TIMEOUT_S)
        marker.write_text(spec)
    return interpreter


if __name__ == "__main__":
    for wanted in sys.argv[1:]:
        print(wanted, python(wanted), flush=True)
