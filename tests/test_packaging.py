"""``pip install .`` is a complete mend: the packs, their tests and every data file in the wheel.

In a checkout the packs are the top-level ``rules/``; pyproject.toml maps that directory into the
wheel as ``proxy/rules/`` (package data), where ``proxy.config.settings`` finds it through
``importlib.resources``. The fast tests check the mapping, the lookup, and a real wheel's contents
(built, as the Dockerfile's build stage builds it, from exactly the files that stage copies); the
slow one installs that wheel in a fresh virtualenv and runs ``mend check``, ``mend test``,
``mend run --help`` and a short ``mend run --workers 2`` from a directory outside the checkout.
The Dockerfile is parsed (dockerfile-parse): what it copies exists and is not ignored, it installs
the wheel rather than the source tree, and it runs as a non-root numeric user without writing
bytecode.
"""

from __future__ import annotations

import importlib.resources
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import tomllib
import urllib.error
import urllib.request
import venv
import zipfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from dockerfile_parse import DockerfileParser  # type: ignore[import-untyped]

from proxy.config import settings
from proxy.config.settings import PACKAGED_RULES
from proxy.policy.rules.ruleengine import FALLBACKS, OWN_ERRORS
from proxy.tools.ruletest.loading import DEFAULT_TESTS

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
SETUPTOOLS: dict[str, Any] = PYPROJECT["tool"]["setuptools"]
PACKS = sorted((ROOT / "rules").glob("*.yaml"))
CASES = sorted((ROOT / "rules" / "tests").glob("*.yaml"))


# --- where the packs are --------------------------------------------------------------------------


def test_packs_are_found_through_importlib_resources_in_a_checkout() -> None:
    """A checkout has no proxy/rules/: the packs are the top-level rules/, read in place."""
    assert not (ROOT / "proxy" / "rules").exists()
    assert PACKAGED_RULES == ROOT / "rules"
    assert DEFAULT_TESTS == ROOT / "rules" / "tests"
    assert len(PACKS) >= 20
    assert list(DEFAULT_TESTS.glob("*.yaml"))  # one per pack: tests/policy/rules/test_packs.py


def test_an_installed_proxy_rules_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the package has rules/ (an installed wheel) that is where the packs are."""
    (tmp_path / "rules" / "tests").mkdir(parents=True)
    monkeypatch.setattr(importlib.resources, "files", lambda _: tmp_path)
    assert settings._packaged_rules() == tmp_path / "rules"
    (tmp_path / "rules" / "tests").rmdir()
    (tmp_path / "rules").rmdir()
    assert settings._packaged_rules() == ROOT / "rules"


def _package_dir(package: str) -> Path:
    """Where setuptools takes ``package`` from (``package-dir``, else its dotted path)."""
    mapping: dict[str, str] = SETUPTOOLS.get("package-dir", {})
    parts = package.split(".")
    for i in range(len(parts), 0, -1):
        prefix = ".".join(parts[:i])
        if prefix in mapping:
            return ROOT / mapping[prefix] / Path(*parts[i:])
    return ROOT / Path(*parts)


def shipped_files() -> dict[str, Path]:
    """What pyproject.toml puts in the wheel: name in the wheel -> file in the checkout."""
    data: dict[str, list[str]] = SETUPTOOLS.get("package-data", {})
    out: dict[str, Path] = {}
    for package in SETUPTOOLS["packages"]:
        where = _package_dir(package)
        inside = Path(*package.split("."))
        for pattern in ["*.py", *data.get(package, [])]:
            for file in where.glob(pattern):
                if file.is_file():
                    out[(inside / file.relative_to(where)).as_posix()] = file
    return out


def test_pyproject_ships_every_file_mend_reads_at_run_time() -> None:
    """The packs, their tests and what those read, fallbacks.yaml, own_errors.yaml and py.typed
    are package data, and every package under proxy/ and every directory under rules/ is listed
    (the list is explicit: rules/ is mapped into it, and setuptools warns about a data directory
    that is not a listed package)."""
    assert "data-files" not in SETUPTOOLS, "data files land outside the package: not found"
    shipped = set(shipped_files().values())
    runtime = {
        *(p for p in (ROOT / "rules").rglob("*") if p.is_file()),
        FALLBACKS,
        OWN_ERRORS,
        ROOT / "proxy" / "py.typed",
    }
    assert runtime <= shipped, sorted(str(p) for p in runtime - shipped)
    packages = {
        ".".join(init.parent.relative_to(ROOT).parts)
        for init in (ROOT / "proxy").rglob("__init__.py")
    }
    packages |= {
        ".".join(("proxy", *d.relative_to(ROOT).parts))
        for d in [ROOT / "rules", *(ROOT / "rules").rglob("*")]
        if d.is_dir() and "__pycache__" not in d.parts
    }
    assert packages <= set(SETUPTOOLS["packages"]), packages - set(SETUPTOOLS["packages"])
    for package in SETUPTOOLS["packages"]:
        assert _package_dir(package).is_dir(), f"{package}: no {_package_dir(package)}"
    # every non-Python file inside the package is shipped too
    for file in (ROOT / "proxy").rglob("*"):
        if file.is_file() and "__pycache__" not in file.parts and file.suffix != ".py":
            assert file in shipped, f"{file.relative_to(ROOT)} is not package data"


def test_a_plain_install_brings_the_fast_event_loop() -> None:
    """uvloop is a dependency wherever it runs (issue 29: a plain ``pip install mend`` ran on
    asyncio's own loop); ``mend[speed]``, the old way to ask for it, still installs."""
    dependencies = PYPROJECT["project"]["dependencies"]
    assert "uvloop>=0.19; sys_platform != 'win32'" in dependencies
    extras = PYPROJECT["project"]["optional-dependencies"]
    assert extras["speed"] == ["uvloop>=0.19; sys_platform != 'win32'"]


# --- the Dockerfile ------------------------------------------------------------------------------


INSTRUCTIONS = {
    "FROM", "RUN", "CMD", "LABEL", "EXPOSE", "ENV", "ADD", "COPY", "ENTRYPOINT", "VOLUME", "USER",
    "WORKDIR", "ARG", "ONBUILD", "STOPSIGNAL", "HEALTHCHECK", "SHELL",
}  # fmt: skip


def dockerfile() -> list[dict[str, Any]]:
    parser = DockerfileParser(path=str(ROOT / "Dockerfile"))
    return [i for i in parser.structure if i["instruction"] != "COMMENT"]


def test_dockerfile_parses_into_known_instructions() -> None:
    instructions = dockerfile()
    assert instructions[0]["instruction"] == "FROM"
    assert {i["instruction"] for i in instructions} <= INSTRUCTIONS
    assert all(i["value"].strip() for i in instructions)


def stages() -> list[tuple[str, list[dict[str, Any]]]]:
    """(alias or index, instructions) for each FROM."""
    out: list[tuple[str, list[dict[str, Any]]]] = []
    for instruction in dockerfile():
        if instruction["instruction"] == "FROM":
            words = instruction["value"].split()
            alias = words[2] if len(words) == 3 and words[1].upper() == "AS" else str(len(out))
            out.append((alias, []))
        else:
            out[-1][1].append(instruction)
    return out


def copies(instructions: list[dict[str, Any]]) -> list[tuple[str | None, list[str], str]]:
    """(--from stage, sources, destination) of each COPY."""
    out = []
    for instruction in instructions:
        if instruction["instruction"] == "COPY":
            words = instruction["value"].split()
            flags = {w.split("=", 1)[0]: w.partition("=")[2] for w in words if w.startswith("--")}
            paths = [w for w in words if not w.startswith("--")]
            out.append((flags.get("--from"), paths[:-1], paths[-1]))
    return out


def dockerignored() -> set[str]:
    lines = (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines()
    return {line.strip() for line in lines if line.strip() and not line.startswith("#")}


def test_dockerfile_builds_the_wheel_then_installs_it() -> None:
    """Two stages: the first builds the wheel, the runtime installs it -- no editable install and
    no source tree (only demo/, which the demo services run)."""
    (build_alias, build), (_, runtime) = stages()
    runs = [i["value"] for i in build if i["instruction"] == "RUN"]
    assert any(re.match(r"pip wheel --no-deps --wheel-dir /dist \.$", r) for r in runs), runs
    runtime_runs = " ".join(i["value"] for i in runtime if i["instruction"] == "RUN")
    assert "pip install" in runtime_runs
    assert " -e " not in runtime_runs
    assert "--editable" not in runtime_runs
    assert "/tmp/dist/mend-" in runtime_runs
    runtime_copies = copies(runtime)
    assert (build_alias, ["/dist/"], "/tmp/dist/") in runtime_copies
    local = [src for stage, sources, _ in runtime_copies if stage is None for src in sources]
    assert local == ["demo"], "the runtime stage holds no source tree of mend"


def test_dockerfile_build_stage_copies_what_the_wheel_needs() -> None:
    """pyproject.toml, the readme, and every directory a package comes from."""
    (_, build), _ = stages()
    copied = {src for stage, sources, _ in copies(build) if stage is None for src in sources}
    needed = {"pyproject.toml", PYPROJECT["project"]["readme"]}
    needed |= {_package_dir(p).relative_to(ROOT).parts[0] for p in SETUPTOOLS["packages"]}
    assert needed <= copied, needed - copied


def test_dockerfile_copy_sources_exist_and_are_not_ignored() -> None:
    ignored = dockerignored()
    aliases = [alias for alias, _ in stages()]
    for index, (alias, instructions) in enumerate(stages()):
        for stage, sources, _ in copies(instructions):
            if stage is not None:
                assert stage in aliases[:index], f"COPY --from={stage}: no earlier stage"
                continue
            for source in sources:
                assert (ROOT / source).exists(), f"{alias}: COPY {source}: missing"
                assert source not in ignored, f"{alias}: COPY {source}: in .dockerignore"


def test_dockerfile_runtime_is_non_root_and_read_only_ready() -> None:
    """A numeric non-root user (Kubernetes' runAsNonRoot can check it) and no bytecode writes."""
    (_, _), (_, runtime) = stages()
    users = [i["value"] for i in runtime if i["instruction"] == "USER"]
    assert len(users) == 1
    uid, _, gid = users[0].partition(":")
    assert uid.isdigit()
    assert int(uid) != 0
    assert gid.isdigit()
    env = " ".join(i["value"] for i in runtime if i["instruction"] == "ENV")
    assert re.search(r"\bPYTHONDONTWRITEBYTECODE=1\b", env)
    assert [i["value"] for i in runtime if i["instruction"] == "ENTRYPOINT"] == ['["mend"]']


def test_compose_runs_the_image_read_only_and_readme_says_the_same_command() -> None:
    """docker-compose.yml runs mend's image as the Dockerfile allows (read-only, tmpfs /tmp), and
    the README starts it with the command the compose file names (Debian's docker-compose, which
    scripts/install-system-deps installs for CI's check of the file)."""
    compose_text = (ROOT / "docker-compose.yml").read_text(encoding="utf-8")
    services = yaml.safe_load(compose_text)["services"]
    built = [name for name, s in services.items() if s.get("image") == "mend:local"]
    assert "mend" in built
    for name in built:
        assert services[name]["read_only"] is True, name
        assert "/tmp" in services[name]["tmpfs"], name
    header = "\n".join(line for line in compose_text.splitlines() if line.startswith("#"))
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    command = re.compile(r"docker[- ]compose up(?: --[\w-]+)*")
    assert (
        set(command.findall(readme))
        == set(command.findall(header))
        == {
            "docker-compose up --build",
            "docker compose up --build",
        }
    )
    assert "docker-compose" in (ROOT / "scripts" / "install-system-deps").read_text()


# --- a real wheel ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The wheel, built as the Dockerfile's build stage builds it: from exactly the files that
    stage copies (so a file the build needs and the image lacks fails here), with pip."""
    src = tmp_path_factory.mktemp("context")
    (_, build), _ = stages()
    for stage, sources, dest in copies(build):  # COPY's rules, dest relative to WORKDIR
        assert stage is None
        assert not dest.startswith("/")
        target = src / dest
        for source in sources:
            origin = ROOT / source
            if origin.is_dir():  # its contents, into dest
                ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
                shutil.copytree(origin, target, ignore=ignore, dirs_exist_ok=True)
            elif dest.endswith("/"):
                target.mkdir(parents=True, exist_ok=True)
                shutil.copy2(origin, target / origin.name)
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(origin, target)
    out = tmp_path_factory.mktemp("dist")
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--wheel-dir", str(out), "-v", "."],
        cwd=src,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    (built,) = out.glob("mend-*.whl")
    return built, result.stdout + result.stderr


def test_wheel_holds_the_packs_their_tests_and_every_data_file(wheel: tuple[Path, str]) -> None:
    """Everything pyproject.toml means to ship is in the wheel, under proxy/, and nothing outside
    the package (no ``.data/`` directory); the build says nothing about data files."""
    path, log = wheel
    names = set(zipfile.ZipFile(path).namelist())
    expected = set(shipped_files())
    assert expected <= names, sorted(expected - names)
    assert {f"proxy/rules/{p.name}" for p in PACKS} <= names
    assert {f"proxy/rules/tests/{p.name}" for p in CASES} <= names
    assert {"proxy/policy/rules/fallbacks.yaml", "proxy/policy/rules/own_errors.yaml"} <= names
    assert not [n for n in names if ".data/" in n]
    outside = {n.split("/")[0] for n in names} - {"proxy"}
    assert all(top.endswith(".dist-info") for top in outside), outside
    for warning in ("data-files", "data_files", "as data is deprecated", "absent from the"):
        assert warning not in log, warning


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _files(root: Path) -> set[Path]:
    return {p for p in root.rglob("*")}


def _wait_ready(proc: subprocess.Popen[bytes], admin: int, log: Path) -> None:
    """Until the admin port says ready; the run's log when it exits or takes a minute."""
    deadline = time.monotonic() + 60
    while True:
        assert proc.poll() is None, log.read_text()[-3000:]
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{admin}/readyz", timeout=2):
                return
        except (urllib.error.URLError, OSError):
            assert time.monotonic() < deadline, "mend run did not become ready"
            time.sleep(0.2)


@pytest.mark.slow
def test_wheel_in_a_fresh_venv_outside_the_checkout(
    wheel: tuple[Path, str], tmp_path: Path
) -> None:
    """``pip install mend-*.whl`` into a new virtualenv, then, from a directory that is not the
    checkout: ``mend check`` and ``mend test`` find the packs and their cases, ``mend run --help``
    answers, and ``mend run --workers 2`` serves and writes nothing outside $TMPDIR."""
    path, _ = wheel
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    bin_dir = env_dir / "bin"
    install = subprocess.run(
        [str(bin_dir / "python"), "-m", "pip", "install", "--quiet",
         "--disable-pip-version-check", str(path)],
        capture_output=True, text=True, check=False, timeout=600,
    )  # fmt: skip
    assert install.returncode == 0, install.stderr[-3000:]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env["PYTHONDONTWRITEBYTECODE"] = "1"

    def mend(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(bin_dir / "mend"), *args],
            cwd=elsewhere,
            env=env,
            capture_output=True,
            text=True,
            check=False,
            timeout=300,
        )

    where = subprocess.run(
        [str(bin_dir / "python"), "-c",
         "import proxy.config.settings as s; print(s.__file__); print(s.PACKAGED_RULES)"],
        cwd=elsewhere, env=env, capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    site = env_dir.resolve()
    assert Path(where[0]).resolve().is_relative_to(site), where
    assert Path(where[1]).resolve().is_relative_to(site), where
    assert Path(where[1]).name == "rules"

    check = mend("check")
    assert check.returncode == 0, check.stderr
    in_files = rf"\d+ rules: \d+ in {len(PACKS)} files, \d+ built in \(fallbacks and mend's own"
    assert re.fullmatch(rf"ok: {in_files} errors\)\n", check.stdout), check.stdout
    tested = mend("test")
    assert tested.returncode == 0, tested.stdout[-3000:] + tested.stderr[-3000:]
    summary = re.search(r"^(\d+) passed, 0 failed$", tested.stdout, re.M)
    assert summary is not None, tested.stdout[-3000:]
    assert int(summary[1]) >= len(PACKS)
    helped = mend("run", "--help")
    assert helped.returncode == 0, helped.stderr
    # no extras asked for, and the fast loop is there (issue 29)
    subprocess.run([str(bin_dir / "python"), "-c", "import uvloop"], env=env, check=True)
    assert "--upstream" in helped.stdout

    # a short run: workers put their metrics under $TMPDIR, and nothing else is written
    tmpdir = tmp_path / "tmpdir"
    tmpdir.mkdir()
    before = _files(env_dir) | _files(elsewhere)
    admin = _free_port()
    with (tmp_path / "run.log").open("wb") as log:
        proc = subprocess.Popen(
            [str(bin_dir / "mend"), "run", "--upstream", "http://127.0.0.1:9", "--workers", "2",
             "--listen", f"127.0.0.1:{_free_port()}", "--admin-listen", f"127.0.0.1:{admin}"],
            cwd=elsewhere, env={**env, "TMPDIR": str(tmpdir)}, stdout=log, stderr=log,
        )  # fmt: skip
    try:
        _wait_ready(proc, admin, tmp_path / "run.log")
        assert [p.name for p in tmpdir.iterdir() if p.name.startswith("mend-metrics-")]
    finally:
        proc.terminate()
        proc.wait(60)
    assert proc.returncode == 0, (tmp_path / "run.log").read_text()[-3000:]
    assert _files(env_dir) | _files(elsewhere) == before
