"""The floors of ``proxy/``: the policy imports no aiohttp, and no floor reaches up.

The floors, bottom to top: ``config`` (the operator's settings, read once), ``policy`` (rules,
envelope, rendering, protocols; shared by the proxy, ``mend test`` and ``mend explain``),
``observation``, ``edge`` (aiohttp lives here), ``runtime``, ``tools`` (docs/design.md, "The
floors").
"""

from __future__ import annotations

import ast
import pkgutil
import subprocess
import sys
from pathlib import Path

import proxy
import proxy.policy

ROOT = Path(__file__).resolve().parent.parent
FLOORS = ["config", "policy", "observation", "edge", "runtime", "tools"]


def _modules(package: str) -> list[str]:
    """Every module under ``package``, dotted, found on disk (nothing imported)."""
    where = ROOT / Path(*package.split("."))
    names = [package]
    for info in pkgutil.walk_packages([str(where)], f"{package}."):
        names.append(info.name)
    return sorted(names)


def test_the_policy_imports_no_aiohttp() -> None:
    """Every module of ``proxy.policy``, imported in a fresh interpreter, leaves aiohttp out."""
    modules = _modules("proxy.policy")
    assert "proxy.policy.evaluate" in modules
    assert "proxy.policy.protocols.mcp" in modules
    code = (
        "import importlib, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        "    if 'aiohttp' in sys.modules:\n"
        "        print(name)\n"
        "        break\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        check=False,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "", f"aiohttp imported by (or with) {done.stdout.strip()}"


def _imports(path: Path) -> set[str]:
    """The ``proxy`` modules (and names) a file imports anywhere but under ``TYPE_CHECKING``."""
    tree = ast.parse(path.read_text("utf-8"))
    typing_only: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", "") == "TYPE_CHECKING":
            typing_only |= {id(inner) for part in node.body for inner in ast.walk(part)}
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("proxy"):
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.startswith("proxy")}
    return found


def _floor(module: str) -> int | None:
    parts = module.split(".")
    return FLOORS.index(parts[1]) if len(parts) > 2 and parts[1] in FLOORS else None


def test_no_floor_reaches_up() -> None:
    """Every floor imports only the floors below it (typing-only imports aside)."""
    modules = {name for floor in FLOORS for name in _modules(f"proxy.{floor}")}
    upward: set[tuple[str, str]] = set()
    for module in modules:
        path = ROOT / Path(*module.split("."))
        file = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
        low = _floor(module)
        for imported in _imports(file):
            high = _floor(imported)
            if imported in modules and low is not None and high is not None and high > low:
                upward.add((module, imported))
    assert upward == set()


def test_every_module_is_in_a_floor() -> None:
    """``proxy/`` holds the floors and nothing else but its package files (no shim modules)."""
    top = {p.name for p in (ROOT / "proxy").iterdir() if p.suffix == ".py" or p.is_dir()}
    top -= {"__pycache__"}
    assert top == {"__init__.py", "__main__.py", *FLOORS}
    assert proxy.policy.__doc__


def _loaded_with(path: Path, modules: set[str]) -> set[str]:
    """The ``proxy`` modules importing ``path`` imports, at its top level (a function's own
    import, such as the tracing SDK's, runs later and cannot make a circle at import time).
    ``from package import module`` is an edge to the module: its package is already loading."""
    found: set[str] = set()
    for node in ast.parse(path.read_text("utf-8")).body:
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("proxy"):
            for alias in node.names:
                name = f"{node.module}.{alias.name}"
                found.add(name if name in modules else node.module)
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.startswith("proxy")}
    return found


def test_no_import_circle() -> None:
    """No module of ``proxy`` imports, through others, a module that imports it back."""
    modules = {name for floor in FLOORS for name in _modules(f"proxy.{floor}")}
    graph: dict[str, set[str]] = {}
    for module in modules:
        path = ROOT / Path(*module.split("."))
        file = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
        graph[module] = {name for name in _loaded_with(file, modules) if name in modules} - {module}
    circles = []
    for start in sorted(graph):
        seen, stack = set(), list(graph[start])
        while stack:
            module = stack.pop()
            if module == start:
                circles.append(start)
                break
            if module not in seen:
                seen.add(module)
                stack.extend(graph[module])
    assert circles == []


def test_proxy_handle_reads_as_the_pipeline_in_one_screen() -> None:
    """``Proxy.handle`` is the request's path in one screen with one exit: the steps it names own
    the branches (docs/design.md, "One request, top to bottom")."""
    source = (ROOT / "proxy" / "runtime" / "proxy.py").read_text("utf-8")
    handle = next(
        node
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.AsyncFunctionDef) and node.name == "handle"
    )
    returns = [node for node in ast.walk(handle) if isinstance(node, ast.Return)]
    assert len(returns) == 1
    assert handle.end_lineno is not None
    assert handle.end_lineno - handle.lineno < 25
