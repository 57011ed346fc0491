"""The `commonroom` command: serve, migrate, check-config (and plugin commands).

serve: load config → migrate → build app → listen → READY=1 → SIGTERM/SIGINT →
stop accepting → finish in-flight requests → stop background work → exit 0.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import ssl
import sys
from typing import Any

from daemon import __version__
from daemon.runtime.backup import BackupError, state_lock
from daemon.runtime.config import ConfigError
from daemon.http.base import request_id_var
from daemon.runtime.plugins import PluginError
from store.db import ReadOnlyDatabase

log = logging.getLogger("commonroom")

DEFAULT_CONFIG = "config.yaml"


class _RequestIdFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = request_id_var.get()
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object a line: time, level, logger, requestId, message (and exception)."""

    def format(self, record: logging.LogRecord) -> str:
        import json
        out = {"time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S") + f".{int(record.msecs):03d}Z",
               "level": record.levelname.lower(), "logger": record.name,
               "requestId": getattr(record, "request_id", "-"), "message": record.getMessage()}
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            out["exception"] = record.exc_text
        return json.dumps(out, ensure_ascii=False)


class JournaldPrefix(logging.Formatter):
    """Prefix each line with its syslog priority (``<3>`` error ... ``<7>`` debug), which
    journald reads from a service's stderr (sd-daemon(3)) and strips."""

    _PRIORITY = {logging.CRITICAL: 2, logging.ERROR: 3, logging.WARNING: 4, logging.INFO: 6, logging.DEBUG: 7}

    def __init__(self, inner: logging.Formatter) -> None:
        super().__init__()
        self.inner = inner

    def format(self, record: logging.LogRecord) -> str:
        priority = self._PRIORITY.get(record.levelno, 6 if record.levelno >= logging.INFO else 7)
        text = self.inner.format(record)
        # A multi-line record (a traceback) keeps its priority on every line.
        return "\n".join(f"<{priority}>{line}" for line in text.split("\n"))


def setup_logging(level: str, fmt: str = "text") -> None:
    """One stderr handler on the root logger, so every logger's lines carry the request id
    and pass through `RedactSecrets` (no token, code or key is ever written). `fmt` is
    ``text`` or ``json``; under systemd (journald on stderr) lines carry their priority."""
    from daemon.security.redact import RedactSecrets

    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(_RequestIdFilter())
    handler.addFilter(RedactSecrets())
    formatter: logging.Formatter
    if fmt == "json":
        formatter = JsonFormatter()
    else:
        formatter = logging.Formatter("%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s")
    if _stderr_is_journal():
        formatter = JournaldPrefix(formatter)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for noisy in ("httpx", "httpcore", "aiosqlite"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))


def _stderr_is_journal() -> bool:
    """systemd sets JOURNAL_STREAM to the device:inode of the journal stream it connected."""
    stream = os.environ.get("JOURNAL_STREAM", "")
    if ":" not in stream:
        return False
    try:
        st = os.fstat(sys.stderr.fileno())
    except (OSError, ValueError):
        return False
    return stream == f"{st.st_dev}:{st.st_ino}"


async def serve(config: Any, pm: Any) -> int:
    # One daemon (or one restore) per state directory at a time.
    with state_lock(config.state_dir, "starting another daemon on it"):
        return await _serve(config, pm)


#: What the server reads from a connection at once (Tornado's default is 64 KB).
READ_CHUNK_BYTES = 16 * 1024


def build_server(app: Any, ssl_ctx: ssl.SSLContext | None = None) -> Any:
    """The daemon's HTTP server for `app` (daemon/http/server.py: per-address connection
    cap, accept back-off), with the configured size and time limits."""
    from daemon.http.server import Server

    srv = app.config.server
    return Server(app, limits=app.connections, ssl_options=ssl_ctx, xheaders=False,
                  max_body_size=max(srv.max_body_bytes, srv.max_upload_bytes) + 65536,
                  # each read from a connection allocates a zeroed buffer of this size, also the
                  # read that finds nothing (after every response): Tornado's 64 KB costs ~3 µs a
                  # request in allocation and page faults, 16 KB ~0.3 µs (docs/performance.md);
                  # a body arrives in pieces of at most this size
                  chunk_size=READ_CHUNK_BYTES,
                  # the wait for a request's head, and the time the head may take once
                  # started: it also ends idle keep-alive connections (docs/configuration.md)
                  idle_connection_timeout=srv.idle_connection_timeout_seconds,
                  # a client that declares a body and never sends it (or drips it) is
                  # dropped instead of holding a connection and an in-flight slot
                  body_timeout=srv.body_timeout_seconds)


async def _serve(config: Any, pm: Any) -> int:
    from tornado.netutil import bind_sockets

    from daemon.http.server import raise_open_files_limit
    from daemon.runtime.app import create_app
    from daemon.runtime.systemd import notify

    old_limit, new_limit = raise_open_files_limit()
    if new_limit != old_limit:
        log.info("raised the open files limit from %d to %d", old_limit, new_limit)
    app = await create_app(config, pm)
    srv = config.server
    ssl_ctx = None
    if srv.tls_cert and srv.tls_key:
        ssl_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ssl_ctx.load_cert_chain(srv.tls_cert, srv.tls_key)
    server = build_server(app, ssl_ctx)
    sockets = bind_sockets(srv.port, srv.host)
    server.add_sockets(sockets)
    port = srv.port
    if port == 0:
        port = sockets[0].getsockname()[1]
    scheme = "https" if ssl_ctx else "http"
    log.info("commonroom %s listening on %s://%s:%d (base_url %s)", __version__, scheme, srv.host,
             port, srv.base_url)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    notify("READY=1")
    await stop.wait()
    log.info("stopping: no new connections; waiting for in-flight requests")
    notify("STOPPING=1")
    server.stop()
    app.begin_stopping()  # long-polls answer and WebSockets close (1001) now, not at the timeout
    await app.drain(srv.shutdown_timeout_seconds, server.receiving_bodies)
    try:
        await asyncio.wait_for(server.close_all_connections(), 2.0)
    except asyncio.TimeoutError:
        pass
    await app.shutdown()
    log.info("stopped")
    del sockets
    return 0


async def run_migrate(config: Any, pm: Any, dry_run: bool = False) -> int:
    from daemon.runtime.app import migrate_with_backup, migration_components
    from store.db import Database, ReadOnlyDatabase
    from store.migrate import unapplied, writer_version

    if dry_run:  # read only: nothing is created or changed, not even an empty database
        if not config.database_path.exists():
            print(f"{config.database_path} does not exist: `commonroom migrate` creates it with every migration")
            return 0
        db = Database(config.database_path, read_only=True)
        await db.open()
        try:
            plan, writer = await unapplied(db, migration_components(pm)), await writer_version(db)
        finally:
            await db.close()
        print(f"{config.database_path}: last migrated by Commonroom {writer or '0.1.x or older'}; "
              f"{len(plan)} migration(s) would be applied" + (":" if plan else ""))
        for m in plan:
            print(f"  {m.component}/{m.version:04d}_{m.name}")
        return 0
    if config.is_follower:
        raise ReadOnlyDatabase("migrate")

    db = Database(config.database_path, mmap_bytes=config.storage.mmap_mb << 20)
    await db.open()
    try:
        applied = await migrate_with_backup(db, config, pm)
    finally:
        await db.close()
    print(f"{len(applied)} migration(s) applied to {config.database_path}")
    return 0


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


async def run_backup(config: Any, pm: Any, args: argparse.Namespace) -> int:
    """A complete backup (database, key files, manifest) while the daemon runs."""
    from pathlib import Path

    from daemon.runtime import backup
    from daemon.runtime.app import backup_keys, state_files

    if (args.destination is None) == (args.into is None):
        print("commonroom backup: give either DESTINATION or --into DIR", file=sys.stderr)
        return 2
    dest = Path(args.destination) if args.destination else Path(args.into) / f"commonroom-{backup.stamp()}"
    keys = backup_keys(config)
    result = await asyncio.to_thread(
        backup.backup, config.database_path, config.state_dir, dest,
        declared_files=state_files(config, pm), secret_key_configured=bool(config.secret_key),
        signing_key=keys[0] if keys else None, progress=_progress)
    if not keys:
        _progress("warning: this backup is not signed (neither storage.backup_key nor secret_key is "
                  "configured): its checksums show damage, not tampering, and restoring it needs "
                  "--unsigned (docs/operations.md, \"Backups\")")
    if config.secret_key:
        _progress("note: secret_key is set in the configuration, not generated: back it up separately "
                  "(without it the stored credentials cannot be decrypted)")
    if args.into and args.keep:
        for gone in await asyncio.to_thread(backup.prune, Path(args.into), args.keep, "commonroom-"):
            _progress(f"removed the old backup {gone}")
    print(result.path)
    return 0


async def run_restore(config: Any, pm: Any, args: argparse.Namespace) -> int:
    from pathlib import Path

    from daemon.runtime import backup
    from daemon.runtime.app import backup_keys, migration_components, state_files
    from store.migrate import newest_versions

    await asyncio.to_thread(
        backup.restore, Path(args.source), config.state_dir, config.storage.database,
        newest_versions(migration_components(pm)), secret_key_configured=bool(config.secret_key),
        declared_files=state_files(config, pm), keys=backup_keys(config), unsigned=args.unsigned,
        progress=_progress)
    return 0


async def run_plugin_command(config: Any, pm: Any, run: Any, args: argparse.Namespace) -> int:
    from daemon.runtime.app import create_app

    app = await create_app(config, pm, start=False)
    try:
        result = await app.call_hook(lambda **_: [run(app, args)])
        return result[0] if isinstance(result[0], int) else 0
    finally:
        await app.shutdown()


def vacuum(config: Any) -> int:
    """`commonroom vacuum`: rewrite the database without its free pages (daemon stopped)."""
    import sqlite3
    if config.is_follower:
        print("commonroom vacuum: a follower's copy is Litestream's; vacuum the primary", file=sys.stderr)
        return 2
    path = config.database_path
    if not path.is_file():
        print(f"commonroom vacuum: no database at {path}", file=sys.stderr)
        return 1
    with state_lock(config.state_dir, "vacuuming its database"):
        conn = sqlite3.connect(path, isolation_level=None)
        try:
            page = conn.execute("PRAGMA page_size").fetchone()[0]
            before = conn.execute("PRAGMA page_count").fetchone()[0] * page
            free = conn.execute("PRAGMA freelist_count").fetchone()[0] * page
            _progress(f"{path}: {before / 1e6:.1f} MB, {free / 1e6:.1f} MB of it free pages; vacuuming "
                      "(needs as much free disk again as the file)")
            conn.execute("VACUUM")
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            after = conn.execute("PRAGMA page_count").fetchone()[0] * page
        finally:
            conn.close()
    print(f"{path}: {before / 1e6:.1f} MB -> {after / 1e6:.1f} MB")
    return 0


def add_replication_commands(sub: Any) -> None:
    sub.add_parser(
        "vacuum", help="rewrite the database without its free pages (daemon stopped)",
        description="Run SQLite's VACUUM on the database: the space that pruning freed goes back "
                    "to the file system. Stop the daemon first; it needs free disk as large as the "
                    "file. With replication on, Litestream then ships the whole file again.")
    sub.add_parser(
        "litestream", help="run Litestream for this server: replicate (primary) or follow (follower)",
        description="Write litestream.yml into the state directory from config.yaml (replication.*) and "
                    "replace this process with `litestream replicate` on a primary, or with "
                    "`litestream restore -f` into follower.replica on a follower "
                    "(commonroom-litestream.service runs it).")


def check_replication(config: Any) -> None:
    """check-config: a follower's settings, and a replica URL Litestream cannot use."""
    from daemon.runtime.replication import check_follower_settings, check_replica_url
    check_follower_settings(config)
    check_replica_url(config)


def _only_asks_for_help(argv: list[str]) -> bool:
    """Whether argparse will print help or the version and exit (so no config is needed)."""
    options = argv[:argv.index("--")] if "--" in argv else argv
    return any(a in ("-h", "--help", "--version") for a in options)


def _plugins_without_config() -> Any:
    from daemon.runtime.plugins import build_plugin_manager
    try:
        return build_plugin_manager()
    except PluginError:
        return build_plugin_manager(load_entry_points=False)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("-c", "--config", default=os.environ.get("COMMONROOM_CONFIG", DEFAULT_CONFIG),
                     help="the configuration file (default: $COMMONROOM_CONFIG or ./config.yaml)")
    known, _ = pre.parse_known_args(argv)

    from daemon.runtime.app import load_config

    try:
        config, pm = load_config(known.config)
    except (ConfigError, PluginError) as exc:
        if not _only_asks_for_help(argv):
            print(f"commonroom: configuration error: {exc}", file=sys.stderr)
            return 2
        # --help and --version work anywhere, without a config.yaml: the commands listed
        # are those of the default plugins (and installed ones, when they load).
        config, pm = None, _plugins_without_config()

    parser = argparse.ArgumentParser(prog="commonroom", parents=[pre],
                                     description="Commonroom community service for the AT Protocol")
    parser.add_argument("--version", action="version", version=f"commonroom {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("serve", help="migrate the database and serve HTTP until SIGTERM")
    migrate_cmd = sub.add_parser("migrate", help="apply pending database migrations and exit")
    migrate_cmd.add_argument("--dry-run", action="store_true",
                             help="list the migrations that would be applied, and which version last migrated "
                                  "the database; change nothing")
    sub.add_parser("check-config", help="validate the configuration and exit")
    backup = sub.add_parser(
        "backup", help="write a complete backup (database, key files, manifest) while the daemon runs",
        description="Write a complete backup into a new directory: the database (SQLite's online "
                    "backup API), the generated key files and a manifest with checksums.")
    backup.add_argument("destination", nargs="?", help="the new directory to write")
    backup.add_argument("--into", metavar="DIR", help="write a time-stamped backup inside DIR instead")
    backup.add_argument("--keep", type=int, default=0, metavar="N",
                        help="with --into: keep only the newest N backups there")
    restore = sub.add_parser(
        "restore", help="restore a backup into a fresh state directory (daemon stopped)",
        description="Check a backup (signature, manifest, checksums, integrity, schema versions) and restore "
                    "it into the configured state directory, which must hold no database yet.")
    restore.add_argument("source", help="a directory written by `commonroom backup`")
    restore.add_argument("--unsigned", action="store_true",
                         help="restore without checking the backup's signature (a backup written "
                              "without storage.backup_key or secret_key; check its origin yourself)")
    add_replication_commands(sub)
    lexicons = sub.add_parser(
        "lexicons", help="check (or write) the plugins' method lexicons against their routes",
        description="Make each plugin's query and procedure lexicons (cr_lexicons) from its routes' "
                    "declarations and compare them with the files: a difference is named by its field "
                    "(exit status 1). --write writes the files instead. The configured database is not "
                    "touched.")
    what = lexicons.add_mutually_exclusive_group()
    what.add_argument("--check", action="store_true", help="compare (the default)")
    what.add_argument("--write", action="store_true", help="write the files from the routes")
    lexicons.add_argument("--plugin", metavar="NAME", help="only this plugin's lexicons")
    plugin_commands: dict[str, Any] = {}
    for commands in pm.hook.cr_cli_commands():
        for name, (help_text, add_args, run) in (commands or {}).items():
            p = sub.add_parser(name, help=help_text)
            if add_args:
                add_args(p)
            plugin_commands[name] = run
    args = parser.parse_args(argv)
    assert config is not None  # without one, parse_args has printed help or the version and exited
    setup_logging(config.log_level, config.log_format)

    try:
        if args.command == "check-config":
            from daemon.runtime.app import load_secret_key
            if config.secret_key:
                load_secret_key(config)  # a malformed key is a configuration error
            check_replication(config)
            print(f"configuration OK: {known.config}")
            return 0
        if args.command == "migrate":
            return asyncio.run(run_migrate(config, pm, args.dry_run))
        if args.command == "backup":
            return asyncio.run(run_backup(config, pm, args))
        if args.command == "restore":
            return asyncio.run(run_restore(config, pm, args))
        if args.command == "vacuum":
            return vacuum(config)
        if args.command == "litestream":
            from daemon.runtime.replication import run_litestream
            return run_litestream(config)
        if args.command == "serve":
            return asyncio.run(serve(config, pm))
        if args.command == "lexicons":
            from daemon.runtime import lexicon_files
            return asyncio.run(lexicon_files.run(config, pm, write=args.write, only=args.plugin))
        return asyncio.run(run_plugin_command(config, pm, plugin_commands[args.command], args))
    except ConfigError as exc:
        print(f"commonroom: configuration error: {exc}", file=sys.stderr)
        return 2
    except BackupError as exc:
        print(f"commonroom: {exc}", file=sys.stderr)
        return 1
    except ReadOnlyDatabase:
        print("commonroom: this server is a read-only follower (server.role: follower): run this on the "
              "primary; its changes reach the followers through Litestream", file=sys.stderr)
        return 2
    except Exception as exc:
        from store.migrate import MigrationFailed, NewerSchemaError
        if isinstance(exc, NewerSchemaError):
            print(f"commonroom: {exc}", file=sys.stderr)
            return 3
        if isinstance(exc, MigrationFailed):
            print(f"commonroom: {exc}", file=sys.stderr)
            return 4
        raise


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
