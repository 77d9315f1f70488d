"""The floors of ``proxy/``: the policy imports no aiohttp, and no floor reaches up.

The floors, bottom to top: ``config`` (the operator's settings, read once), ``policy`` (rules,
envelope, rendering, protocols; shared by the proxy, ``mend test`` and ``mend explain``),
``observation``, ``edge`` (aiohttp lives here), ``runtime``, ``tools`` (docs/design.md, "The
floors"). The policy floor has rooms (``rules``, ``envelope``, ``retry``, ``render``...), each
allowed to import only what its docstring says (issue 44).
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import pytest

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


def _every_import(path: Path, modules: set[str]) -> set[str]:
    """The ``proxy`` modules a file imports anywhere: at its top, in a function, under
    ``TYPE_CHECKING``. ``from package import module`` is an edge to the module, ``from module
    import name`` to the module."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("proxy"):
            for alias in node.names:
                name = f"{node.module}.{alias.name}"
                found.add(name if name in modules else node.module)
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.startswith("proxy")}
    return found & modules


def _graph() -> dict[str, set[str]]:
    """Module -> the modules it imports, a package's import of its own modules left out (a
    package's ``__init__`` re-exporting its members is not a circle)."""
    modules = {name for floor in FLOORS for name in _modules(f"proxy.{floor}")}
    graph: dict[str, set[str]] = {}
    for module in modules:
        path = ROOT / Path(*module.split("."))
        file = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
        imported = _every_import(file, modules) - {module}
        graph[module] = {name for name in imported if not name.startswith(f"{module}.")}
    return graph


def test_no_import_circle() -> None:
    """No module of ``proxy`` imports, through others, a module that imports it back, counting
    type-only and lazy imports (issue 44)."""
    graph = _graph()
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


#: The policy floor's rooms and what each may import of the floor: other rooms and the top
#: modules (``proxy/policy/__init__.py``). Each room's docstring says the same.
ROOMS: dict[str, set[str]] = {
    "rules": {"envelope", "redaction", "openapi", "exchange", "json_depth", "regex"},
    "envelope": {"rules", "retry", "redaction", "protocols", "exchange", "regex", "shorten"},
    "retry": {"rules", "exchange", "regex"},
    "render": {"envelope", "shorten"},
    "protocols": {"envelope", "render", "exchange", "json_depth", "regex"},
    "redaction": {"rules", "json_depth", "regex", "shorten"},
    "openapi": {"envelope", "retry", "evaluate", "exchange", "json_depth", "regex", "shorten"},
    "crosscall": {"envelope"},
}
TOP = {"exchange", "evaluate", "explanation", "regex", "shorten", "json_depth", "upstream_body"}


def _room(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if parts[:2] == ["proxy", "policy"] and len(parts) > 2 else None


def test_the_policy_floor_holds_its_rooms_and_its_top_modules() -> None:
    """``proxy/policy/`` holds the rooms and the shared top modules, nothing else."""
    held = {p.stem for p in (ROOT / "proxy" / "policy").iterdir() if p.name != "__pycache__"}
    assert held == {"__init__", *ROOMS, *TOP}


def test_each_room_imports_only_what_it_may() -> None:
    """A module of a room imports, in the policy floor, only its own room, the rooms and the top
    modules its room may import."""
    strays = set()
    for module, imported in _graph().items():
        room = _room(module)
        if room not in ROOMS:
            continue
        for name in imported:
            other = _room(name)
            if other is not None and other != room and other not in ROOMS[room]:
                strays.add((module, name))
    assert strays == set()


@pytest.mark.parametrize("room", sorted(ROOMS))
def test_each_room_says_what_it_may_import(room: str) -> None:
    """A room's docstring ends in a "May import" paragraph naming exactly what the table allows."""
    doc = importlib.import_module(f"proxy.policy.{room}").__doc__ or ""
    said = doc.rpartition("May import, in the policy floor:")[2]
    assert said, f"proxy.policy.{room} says nothing of what it may import"
    assert set(re.findall(r"``(\w+)``", said)) == ROOMS[room]


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
