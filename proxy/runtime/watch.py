"""Hot reload: a file watcher that polls the rule files, and the one reload-and-log step.

Every trigger -- the watcher, ``SIGHUP``, ``POST /-/reload`` -- goes through ``reload_rules``:
``RuleStore.reload`` builds a whole new engine and swaps it in only if every file loads, so a
request in flight keeps the engine it started with and a bad file never replaces good rules. The
outcome is counted by ``Metrics.reloaded`` (through ``RuleStore.on_reload``) and logged here, a
rejection with every ``file:line`` problem.

The watcher polls (no dependency, works on every filesystem and in containers with bind mounts):
each interval it takes the (mtime, size, inode, checksum) of every rule file the settings name -- a
directory means its YAML files, so adding or removing one counts -- and when that changes it waits
until the files stay still for ``debounce`` seconds (an editor's save in several writes is one
reload), then reloads once.

It compares ``stat`` first and reads nothing when size, mtime and inode are what they were: the
checksum (two saves within one mtime tick still differ) is computed again only for a file whose
``stat`` changed or whose mtime is within ``FRESH_NS`` of now, and never for a file over
``max_file_bytes``. An idle mend costs a few ``stat`` calls a second whatever the size of its
rule set (it read and summed every file on every poll: 9.4 % of a core with a 100 MB file).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import zlib
from collections.abc import Iterable
from pathlib import Path

from structlog.typing import FilteringBoundLogger

from proxy.config.settings import Settings, needs_restart
from proxy.config.sourcefile import MAX_FILE_BYTES
from proxy.config.yamlfile import RuleError
from proxy.policy.rules.ruleengine import Engine, RuleStore

#: One reload at a time (the watcher, the admin port and SIGHUP each reload in a thread): two
#: overlapping loads could otherwise finish out of order and leave the older files' rules in force.
_RELOADING = threading.Lock()

Signature = tuple[int, int, int, int]
Snapshot = dict[str, Signature | None]


def reload_rules(
    store: RuleStore, logger: FilteringBoundLogger, trigger: str
) -> Engine | RuleError:
    """Reload and log the outcome: the new engine, or the error that kept the old one; and
    which changed settings only a restart applies."""
    try:
        with _RELOADING:
            before = store.settings
            engine = store.reload()
    except RuleError as exc:
        logger.error(
            "rules_reload_rejected",
            trigger=trigger,
            problems=list(exc.problems),
            rules=store.engine.rule_count,
        )
        return exc
    after = store.settings
    if after is before:
        logger.info("rules_reloaded", trigger=trigger, rules=engine.rule_count)
        return engine
    logger.info(
        "rules_reloaded",
        trigger=trigger,
        rules=engine.rule_count,
        routes=[f"{r.name} {r.prefix} -> {r.upstream}" for r in after.routes],
        config_changed=after != before,
    )
    if changed := needs_restart(before, after):
        logger.warning(
            "config_restart_needed",
            settings=changed,
            detail="these settings apply when mend restarts; the running values stay in force",
        )
    return engine


def watched_paths(settings: Settings, config: Path | None = None) -> list[Path]:
    """The ``--config`` file, every rule file or directory the settings name, shared and per
    route, the operator's redaction detector files, and the certificates the listeners serve
    and routes' upstream TLS files (they reload with the rules: ``proxy/edge/tls.py``).

    The shipped detectors (``rules/redaction/``, package data) are read again by every reload
    but not polled: reading and summing them every second cost more instructions than an error
    request's whole redaction."""
    paths = [*([config] if config is not None else []), *settings.rule_paths()]
    paths.extend(settings.redaction.detectors)
    for route in settings.routes:
        paths.extend(route.rules)
        paths.extend(route.redaction.detectors)
        if route.tls is not None:
            paths.extend(
                p for p in (route.tls.ca_file, route.tls.cert_file, route.tls.key_file) if p
            )
        if route.openapi is not None:
            paths.append(route.openapi)
    for tls_file in (
        settings.tls_cert,
        settings.tls_key,
        settings.admin_tls_cert,
        settings.admin_tls_key,
    ):
        if tls_file is not None:
            paths.append(tls_file)
    return list(dict.fromkeys(paths))


#: A file modified this recently may be written again within the same mtime tick: its checksum
#: is taken on every look until it is older.
FRESH_NS = 2_000_000_000


class Looker:
    """Takes snapshots, remembering each file's checksum for as long as its ``stat`` holds."""

    def __init__(self, max_bytes: int = MAX_FILE_BYTES) -> None:
        self.max_bytes = max_bytes
        self._sums: dict[str, tuple[tuple[int, int, int], int]] = {}

    def signature(self, path: Path) -> Signature | None:
        """mtime, size, inode and a checksum (-1 for a file over the cap: it is not read)."""
        try:
            st = path.stat()
        except OSError:
            return None
        key = str(path)
        stat = (st.st_mtime_ns, st.st_size, st.st_ino)
        known = self._sums.get(key)
        if known is not None and known[0] == stat and time.time_ns() - st.st_mtime_ns > FRESH_NS:
            return (*stat, known[1])
        if st.st_size > self.max_bytes:
            crc = -1
        else:
            try:
                with path.open("rb") as handle:
                    crc = zlib.crc32(handle.read(self.max_bytes + 1))
            except OSError:
                return None
        self._sums[key] = (stat, crc)
        return (*stat, crc)

    def snapshot(self, paths: Iterable[Path]) -> Snapshot:
        """What the watched files look like now; a missing file is ``None``."""
        out: Snapshot = {}
        for path in paths:
            if path.is_dir():
                try:
                    children = sorted(path.iterdir())
                except OSError:
                    out[str(path)] = None
                    continue
                for child in children:
                    if child.suffix in {".yaml", ".yml"}:
                        out[str(child)] = self.signature(child)
            else:
                out[str(path)] = self.signature(path)
        for gone in self._sums.keys() - out.keys():
            del self._sums[gone]
        return out


def snapshot(paths: Iterable[Path]) -> Snapshot:
    """What the watched files look like now (every checksum taken afresh)."""
    return Looker().snapshot(paths)


class RuleWatcher:
    """Polls the rule files every ``interval`` seconds and reloads when they change."""

    def __init__(
        self,
        store: RuleStore,
        logger: FilteringBoundLogger,
        *,
        interval: float = 1.0,
        debounce: float = 0.25,
        config: Path | None = None,
    ) -> None:
        self.store = store
        self.log = logger
        self.interval = interval
        self.debounce = debounce
        self.config = config
        self._task: asyncio.Task[None] | None = None
        self.looker = Looker(store.settings.max_file_bytes)

    @property
    def paths(self) -> list[Path]:
        """What to watch under the settings in force: a reloaded config may name other files."""
        return watched_paths(self.store.settings, self.config)

    async def _settled(self, seen: Snapshot) -> Snapshot:
        """Wait until the files stop changing (each look ``debounce`` apart)."""
        while True:
            await asyncio.sleep(self.debounce)
            now = await asyncio.to_thread(self.looker.snapshot, self.paths)
            if now == seen:
                return now
            seen = now

    async def run(self) -> None:
        last = await asyncio.to_thread(self.looker.snapshot, self.paths)
        while True:
            await asyncio.sleep(self.interval)
            self.looker.max_bytes = self.store.settings.max_file_bytes  # a reload may change it
            now = await asyncio.to_thread(self.looker.snapshot, self.paths)
            if now == last:
                continue
            settled = await self._settled(now)
            changed = sorted(k for k in {*last, *settled} if last.get(k) != settled.get(k))
            last = settled
            if not changed:
                continue
            self.log.info("rule_files_changed", files=changed)
            watched = self.paths
            try:
                # compiling takes a while on big rule sets: off the loop, so requests keep flowing
                await asyncio.to_thread(reload_rules, self.store, self.log, "watch")
            except Exception as exc:  # the watcher must outlive any one bad reload
                self.log.error("rules_reload_failed", trigger="watch", error=repr(exc))
            if self.paths != watched:  # the reloaded config names other files: watch those
                fresh = await asyncio.to_thread(self.looker.snapshot, self.paths)
                last = {**fresh, **{k: v for k, v in settled.items() if k in fresh}}

    def start(self) -> asyncio.Task[None]:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self.run(), name="mend-watch")
        return self._task

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
