"""Complete backups and restores of a state directory (docs/operations.md, "Backups").

A backup is a directory:

* ``<database>``: the SQLite database, copied with SQLite's online backup API (consistent
  while the daemon writes; checked with ``PRAGMA integrity_check`` after the copy);
* the generated key files that the database cannot be used without: ``secret_key`` (it
  seals every stored credential) and whatever plugins declare through ``cr_state_files``
  (the OAuth client key);
* ``manifest.json``: format, version, time, each component's schema version, each file's
  size and SHA-256, and a signature: an HMAC-SHA256 of all that under a key that is not in
  the backup (`storage.backup_key`, or the configured `secret_key`), so a backup changed
  afterwards (a swapped database with recomputed checksums) is refused on restore.

A backup is written into ``<dir>.partial`` and renamed into place when complete, so a
directory with a manifest is always a whole backup.

A restore checks everything before it writes anything: the signature (unless the operator
says ``--unsigned``), that the manifest lists only the database and the known key files,
every checksum, the database's integrity, and that this Commonroom knows every schema
version in it. It restores only into a state directory that has no database yet, and only
while no daemon holds that directory's lock (``commonroom.lock``, held by ``commonroom serve``).
"""

from __future__ import annotations

import datetime
import fcntl
import hashlib
import hmac
import json
import os
import shutil
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from daemon import __version__

MANIFEST = "manifest.json"
FORMAT = 1
LOCK_FILE = "commonroom.lock"
SECRET_KEY_FILE = "secret_key"
_PAGES_PER_STEP = 256

Progress = Callable[[str], None]


class BackupError(Exception):
    """A backup or restore that cannot be done; the message says why and what to do."""


@dataclass(frozen=True)
class SigningKey:
    """A key that signs backups: `source` names the setting it comes from (``backup_key``
    or ``secret_key``: never a file inside the backup), `key` its 32 bytes."""

    source: str
    key: bytes

    def mac_key(self) -> bytes:
        # A key of its own, derived: the secret key's other uses never see this one.
        return hmac.new(self.key, b"commonroom backup signature v1", hashlib.sha256).digest()

    def key_id(self) -> str:
        return hashlib.sha256(b"commonroom-backup-key-id" + self.mac_key()).hexdigest()[:8]

    def sign(self, manifest: dict[str, Any]) -> str:
        return hmac.new(self.mac_key(), _signed_bytes(manifest), hashlib.sha256).hexdigest()


def _signed_bytes(manifest: dict[str, Any]) -> bytes:
    """What the signature covers: the whole manifest but the signature itself (each file's
    checksum, so every byte of the backup), in one canonical form."""
    body = {k: v for k, v in manifest.items() if k != "signature"}
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def _quiet(_: str) -> None:
    pass


# ------------------------------------------------------------------ the daemon's lock


@contextmanager
def state_lock(state_dir: Path, what: str) -> Iterator[None]:
    """Hold the state directory's lock (one daemon or one restore at a time). Raises
    `BackupError` if another process holds it."""
    state_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(state_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise BackupError(f"{state_dir} is in use by a running Commonroom daemon "
                              f"(it holds {state_dir / LOCK_FILE}); stop it before {what}") from None
        yield
    finally:
        os.close(fd)


# ------------------------------------------------------------------ files


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def key_files(state_dir: Path, declared: list[str], secret_key_configured: bool) -> list[str]:
    """Names of the key files in `state_dir` a backup must hold (those that exist)."""
    names = [] if secret_key_configured else [SECRET_KEY_FILE]
    names += [n for n in declared if n not in names]
    for name in names:
        if Path(name).name != name:
            raise BackupError(f"a plugin declared the state file {name!r}: only plain file names are allowed")
    return [n for n in names if (state_dir / n).is_file()]


def schema_versions(db_path: Path) -> dict[str, int]:
    con = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        rows = con.execute("SELECT component, MAX(version) FROM schema_migrations GROUP BY component").fetchall()
    except sqlite3.DatabaseError as exc:
        raise BackupError(f"{db_path} is not a Commonroom database ({exc})") from None
    finally:
        con.close()
    return {component: int(version) for component, version in rows}


def _integrity(db_path: Path) -> None:
    con = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        result = con.execute("PRAGMA integrity_check").fetchone()[0]
    except sqlite3.DatabaseError as exc:
        raise BackupError(f"{db_path} is not a readable SQLite database ({exc})") from None
    finally:
        con.close()
    if result != "ok":
        raise BackupError(f"{db_path} fails SQLite's integrity check: {result}")


# ------------------------------------------------------------------ backup


@dataclass(frozen=True)
class BackupResult:
    path: Path
    manifest: dict[str, Any]


def backup(db_path: Path, state_dir: Path, dest: Path, *, declared_files: list[str],
           secret_key_configured: bool, signing_key: SigningKey | None = None,
           progress: Progress = _quiet) -> BackupResult:
    """Write a complete backup of the database at `db_path` and the key files of
    `state_dir` into the new directory `dest` (blocking: run it in a thread), signed with
    `signing_key` when one is given."""
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise BackupError(f"{dest} exists and is not an empty directory; choose a new one")
    if not db_path.is_file():
        raise BackupError(f"there is no database at {db_path}")
    partial = dest.with_name(dest.name + ".partial")
    if partial.exists():
        shutil.rmtree(partial)  # a backup that was interrupted: never a whole one
    partial.mkdir(parents=True, mode=0o700)
    copy = partial / db_path.name

    src = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    out = sqlite3.connect(copy)
    try:
        def step(status: int, remaining: int, total: int) -> None:
            done = total - remaining
            progress(f"copying the database: {done}/{total} pages ({100 * done // max(total, 1)} %)")
        with out:
            src.backup(out, pages=_PAGES_PER_STEP, progress=step)
        # A self-contained file: no -wal/-shm beside it (the daemon turns WAL back on).
        out.execute("PRAGMA journal_mode=DELETE")
    finally:
        out.close()
        src.close()
    progress("checking the copy's integrity")
    _integrity(copy)

    names = key_files(state_dir, declared_files, secret_key_configured)
    for name in names:
        shutil.copyfile(state_dir / name, partial / name)
        os.chmod(partial / name, 0o600)
    files = {name: {"bytes": (partial / name).stat().st_size, "sha256": _sha256(partial / name)}
             for name in [db_path.name, *names]}
    manifest = {
        "format": FORMAT,
        "commonroomVersion": __version__,
        "createdAt": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "database": db_path.name,
        "schema": schema_versions(copy),
        "secretKey": "configured" if secret_key_configured else "included",
        "files": files,
    }
    if signing_key is not None:
        manifest["signature"] = {"alg": "HMAC-SHA256", "key": signing_key.source,
                                 "keyId": signing_key.key_id(), "value": signing_key.sign(manifest)}
    (partial / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    if dest.exists():
        dest.rmdir()
    partial.rename(dest)
    progress(f"backup written to {dest}")
    return BackupResult(dest, manifest)


def prune(parent: Path, keep: int, prefix: str = "") -> list[Path]:
    """Delete all but the newest `keep` whole backups (directories with a manifest) named
    ``<prefix>*`` in `parent`; return what was deleted. Names sort by time (UTC stamps)."""
    backups = sorted(p for p in parent.iterdir()
                     if p.is_dir() and p.name.startswith(prefix) and (p / MANIFEST).is_file())
    doomed = backups[:-keep] if keep > 0 else backups
    for path in doomed:
        shutil.rmtree(path)
    return doomed


def stamp() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")


# ------------------------------------------------------------------ restore


def read_manifest(src: Path) -> dict[str, Any]:
    try:
        manifest = json.loads((src / MANIFEST).read_text())
    except FileNotFoundError:
        raise BackupError(f"{src} has no {MANIFEST}: it is not a complete Commonroom backup") from None
    except ValueError as exc:
        raise BackupError(f"{src / MANIFEST} is not valid JSON ({exc})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise BackupError(f"{src / MANIFEST} is not a backup format this Commonroom reads "
                          f"(format {manifest.get('format') if isinstance(manifest, dict) else '?'})")
    return manifest


def check_signature(manifest: dict[str, Any], where: Path, keys: list[SigningKey], *,
                    unsigned: bool, progress: Progress = _quiet) -> None:
    """Refuse a backup whose signature is missing or does not verify under any of `keys`
    (the restoring configuration's), unless `unsigned` (the operator's ``--unsigned``)."""
    if unsigned:
        progress("warning: --unsigned: the backup's signature is not checked; its files are "
                 "restored as they are, whoever wrote them")
        return
    signature = manifest.get("signature")
    if not isinstance(signature, dict) or not isinstance(signature.get("value"), str):
        raise BackupError(f"{where} is not signed (it was written without storage.backup_key or "
                          "secret_key configured), so nothing shows it is the backup that was written: "
                          "restore it with --unsigned only if you know where it has been")
    source = signature.get("key")
    usable = [k for k in keys if k.source == source]
    if not usable:
        raise BackupError(f"{where} is signed with the {source!s:.40} setting, which this configuration "
                          f"does not have: configure the same {'storage.backup_key' if source == 'backup_key' else 'secret_key'} "
                          "to check it (or restore with --unsigned)")
    if not any(hmac.compare_digest(k.sign(manifest), signature["value"]) for k in usable):
        raise BackupError(f"{where}'s signature does not verify: the backup was changed after it was "
                          f"written, or it was signed with another {source} (key id {str(signature.get('keyId'))[:16]})")
    progress(f"signature verified ({source})")


def verify(src: Path, known_schema: dict[str, int], progress: Progress = _quiet, *,
           allowed_files: frozenset[str] | None = None, keys: list[SigningKey] | None = None,
           unsigned: bool = False) -> dict[str, Any]:
    """Check a backup without changing anything; return its manifest. `allowed_files`: the
    key files a backup may hold besides the database (None: any plain name, for tools that
    only read a backup); `keys`: the signing keys to check it with (see `check_signature`;
    None skips the check, for callers that do not restore)."""
    manifest = read_manifest(src)
    if keys is not None:
        check_signature(manifest, src / MANIFEST, keys, unsigned=unsigned, progress=progress)
    files = manifest.get("files") or {}
    database = manifest.get("database")
    if not isinstance(files, dict) or not isinstance(database, str) or database not in files \
            or Path(database).name != database:
        raise BackupError(f"{src / MANIFEST} names no database file")
    if allowed_files is not None:
        # Only the database and the known key files: nothing else (a database's -wal
        # beside it, a file of another program) is ever copied into the state directory.
        unknown = sorted(n for n in files if n != database and n not in allowed_files)
        if unknown or database in allowed_files:
            raise BackupError(f"{src / MANIFEST} lists {', '.join(repr(n[:80]) for n in unknown) or repr(database)}, "
                              "which is not a file a Commonroom backup holds (only the database and the "
                              f"key files {', '.join(sorted(allowed_files))}): refusing to restore it")
    for name, meta in files.items():
        path = src / name
        if Path(name).name != name or not path.is_file():
            raise BackupError(f"{path} is missing from the backup")
        progress(f"checking {name}")
        if _sha256(path) != meta.get("sha256") or path.stat().st_size != meta.get("bytes"):
            raise BackupError(f"{path} does not match its checksum in the manifest: the backup is damaged")
    _integrity(src / database)
    for component, version in schema_versions(src / database).items():
        newest = known_schema.get(component)
        if newest is None:
            raise BackupError(f"the backup has data of the plugin '{component}', which this Commonroom "
                              "does not load; enable it before restoring")
        if version > newest:
            raise BackupError(f"the backup has schema version {version} of '{component}', but this "
                              f"Commonroom knows only up to {newest}: restore it with a newer version")
    return manifest


def restore(src: Path, state_dir: Path, db_name: str, known_schema: dict[str, int], *,
            secret_key_configured: bool, declared_files: list[str], keys: list[SigningKey],
            unsigned: bool = False, progress: Progress = _quiet) -> dict[str, Any]:
    """Restore the backup `src` into the fresh `state_dir` (blocking: run it in a thread).
    Only the database and the key files (`secret_key`, `declared_files`) are accepted; the
    signature must verify under one of `keys` unless `unsigned`."""
    allowed = frozenset([SECRET_KEY_FILE, *declared_files])
    manifest = verify(src, known_schema, progress, allowed_files=allowed, keys=keys, unsigned=unsigned)
    with state_lock(state_dir, "restoring into it"):
        target_db = state_dir / db_name
        if target_db.exists():
            raise BackupError(f"{target_db} exists: restore into a fresh state directory "
                              "(move the old one aside first)")
        for suffix in ("-wal", "-shm", "-journal"):
            # SQLite would replay a leftover -wal or -journal into the restored database.
            if (state_dir / f"{db_name}{suffix}").exists():
                raise BackupError(f"{state_dir / (db_name + suffix)} is left from an older database: "
                                  "restore into a fresh state directory (move it aside first)")
        files = dict(manifest["files"])
        if SECRET_KEY_FILE in files and secret_key_configured:
            progress("note: secret_key is set in the configuration, so the backup's secret_key "
                     "file is not used; it must be the same key")
        staging = state_dir / ".restore.partial"
        if staging.exists():
            shutil.rmtree(staging)
        staging.mkdir(mode=0o700)
        for name in files:
            target = db_name if name == manifest["database"] else name
            if name != manifest["database"] and (state_dir / target).exists():
                raise BackupError(f"{state_dir / target} exists: restore into a fresh state directory")
            progress(f"copying {name}")
            shutil.copyfile(src / name, staging / target)
            os.chmod(staging / target, 0o600)
        # Keys first, the database last: a database present means the restore finished.
        for path in sorted(staging.iterdir(), key=lambda p: p.name == db_name):
            os.replace(path, state_dir / path.name)
        staging.rmdir()
    progress(f"restored {src} into {state_dir}")
    return manifest
