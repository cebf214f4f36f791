"""Fixtures: a live gpusched-server (plain, TLS and mutual TLS) and generated TLS material.

The server binary comes from ``GPUSCHED_SERVER_BIN``, else ``$CARGO_TARGET_DIR/debug/gpusched-server``
(relative CARGO_TARGET_DIR = relative to the repository root), else
``<repo>/target/debug/gpusched-server``. A missing binary fails the tests that need it, unless
``GPUSCHED_ALLOW_SKIP=1`` (then they are skipped).
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
CLIENT_DIR = Path(__file__).resolve().parents[1]
# The shared vectors; GPUSCHED_TESTDATA points elsewhere (e.g. vectors under development).
TESTDATA = Path(os.environ.get("GPUSCHED_TESTDATA") or REPO / "proto" / "testdata").resolve()
START_TIMEOUT_S = float(os.environ.get("GPUSCHED_SERVER_START_TIMEOUT", "60"))
GRPC_RE = re.compile(r"grpc=(\S+)")


def server_binary() -> Path:
    env = os.environ.get("GPUSCHED_SERVER_BIN")
    if env:
        return Path(env)
    target = os.environ.get("CARGO_TARGET_DIR")
    base = (REPO / target) if target else REPO / "target"
    return base / "debug" / "gpusched-server"


def vector_files() -> list[Path]:
    return sorted(TESTDATA.glob("*.json"))


@dataclass
class RunningServer:
    """A gpusched-server child process."""

    address: str  # host:port of the gRPC listener
    first_line: str
    proc: subprocess.Popen[str]
    log_path: Path

    @property
    def metrics_address(self) -> str:
        """host:port of the metrics listener."""
        m = re.search(r"metrics=(\S+)", self.first_line)
        assert m, self.first_line
        return m.group(1)

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)


def start_server(extra_args: list[str], log_path: Path) -> RunningServer:
    binary = server_binary()
    if not binary.is_file():
        msg = (
            f"gpusched-server binary not found at {binary} (set GPUSCHED_SERVER_BIN, or build it: "
            "cargo build -p gpusched-service)"
        )
        if os.environ.get("GPUSCHED_ALLOW_SKIP") == "1":
            pytest.skip(msg)
        pytest.fail(msg, pytrace=False)
    # A "--listen" in extra_args replaces 127.0.0.1:0 (e.g. to restart a server at its address).
    listen = [] if "--listen" in extra_args else ["--listen", "127.0.0.1:0"]
    args = [str(binary), *listen, "--metrics-listen", "127.0.0.1:0", *extra_args]
    log = open(log_path, "w")  # noqa: SIM115 - closed with the process
    proc = subprocess.Popen(
        args, stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL, text=True, cwd=REPO
    )
    log.close()
    assert proc.stdout is not None
    first: list[str] = []

    def read_first() -> None:
        assert proc.stdout is not None
        first.append(proc.stdout.readline())
        for _ in proc.stdout:  # drain: the server should print nothing more, but never block it
            pass

    reader = threading.Thread(target=read_first, daemon=True)
    reader.start()
    deadline = time.monotonic() + START_TIMEOUT_S
    while not first and time.monotonic() < deadline and proc.poll() is None:
        reader.join(0.05)
    reader.join(0.2)  # the process may have printed and exited at once
    if not first or not first[0]:
        proc.kill()
        proc.wait(timeout=5)
        pytest.fail(
            f"gpusched-server {' '.join(args[1:])} printed no first line within {START_TIMEOUT_S} s "
            f"(exit code {proc.returncode}); stderr:\n{log_path.read_text(errors='replace')[-4000:]}",
            pytrace=False,
        )
    line = first[0].strip()
    m = GRPC_RE.search(line)
    if not m or m.group(1) == "off":
        proc.kill()
        proc.wait(timeout=5)
        pytest.fail(f"no grpc=HOST:PORT in the server's first stdout line: {line!r}", pytrace=False)
    return RunningServer(address=m.group(1), first_line=line, proc=proc, log_path=log_path)


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """A plaintext gpusched-server on 127.0.0.1 (embedded default config)."""
    srv = start_server([], tmp_path_factory.mktemp("server") / "stderr.log")
    yield srv
    srv.stop()
    assert srv.proc.returncode == 0, f"server exit code {srv.proc.returncode}:\n{srv.log()[-4000:]}"


@pytest.fixture(scope="session")
def address(server: RunningServer) -> str:
    return server.address


# --- TLS -----------------------------------------------------------------------------------------


@dataclass
class TlsFiles:
    dir: Path
    ca_cert: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    other_ca_cert: Path  # a CA that signed nothing the server trusts
    other_client_cert: Path  # client cert signed by other_ca
    other_client_key: Path


def _make_tls(dir: Path) -> TlsFiles:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.timezone.utc)

    def name(cn: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    def key() -> ec.EllipticCurvePrivateKey:
        return ec.generate_private_key(ec.SECP256R1())

    def write_key(path: Path, k: ec.EllipticCurvePrivateKey) -> None:
        path.write_bytes(
            k.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )

    def write_cert(path: Path, c: x509.Certificate) -> None:
        path.write_bytes(c.public_bytes(serialization.Encoding.PEM))

    def ca(cn: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
        k = key()
        c = (
            x509.CertificateBuilder()
            .subject_name(name(cn))
            .issuer_name(name(cn))
            .public_key(k.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_cert_sign=True,
                    crl_sign=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(k.public_key()), critical=False)
            .sign(k, hashes.SHA256())
        )
        return c, k

    def leaf(
        cn: str,
        issuer: tuple[x509.Certificate, ec.EllipticCurvePrivateKey],
        server: bool,
    ) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
        k = key()
        b = (
            x509.CertificateBuilder()
            .subject_name(name(cn))
            .issuer_name(issuer[0].subject)
            .public_key(k.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.ExtendedKeyUsage(
                    [ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH]
                ),
                critical=False,
            )
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer[0].public_key()),  # type: ignore[arg-type]
                critical=False,
            )
        )
        if server:
            b = b.add_extension(
                x509.SubjectAlternativeName(
                    [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
                ),
                critical=False,
            )
        else:
            b = b.add_extension(
                x509.SubjectAlternativeName([x509.DNSName("gpusched-test-client")]), critical=False
            )
        return b.sign(issuer[1], hashes.SHA256()), k

    the_ca = ca("gpusched test CA")
    other_ca = ca("gpusched other CA")
    srv = leaf("localhost", the_ca, server=True)
    cli = leaf("gpusched-test-client", the_ca, server=False)
    other_cli = leaf("gpusched-test-client", other_ca, server=False)
    files = TlsFiles(
        dir=dir,
        ca_cert=dir / "ca.pem",
        server_cert=dir / "server.pem",
        server_key=dir / "server.key",
        client_cert=dir / "client.pem",
        client_key=dir / "client.key",
        other_ca_cert=dir / "other-ca.pem",
        other_client_cert=dir / "other-client.pem",
        other_client_key=dir / "other-client.key",
    )
    write_cert(files.ca_cert, the_ca[0])
    write_cert(files.other_ca_cert, other_ca[0])
    write_cert(files.server_cert, srv[0])
    write_key(files.server_key, srv[1])
    write_cert(files.client_cert, cli[0])
    write_key(files.client_key, cli[1])
    write_cert(files.other_client_cert, other_cli[0])
    write_key(files.other_client_key, other_cli[1])
    return files


@pytest.fixture(scope="session")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    pytest.importorskip("cryptography")
    return _make_tls(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="session")
def tls_server(tls_files: TlsFiles, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """gpusched-server with server-side TLS only."""
    srv = start_server(
        ["--tls-cert", str(tls_files.server_cert), "--tls-key", str(tls_files.server_key)],
        tmp_path_factory.mktemp("tls-server") / "stderr.log",
    )
    yield srv
    srv.stop()


@pytest.fixture(scope="session")
def mtls_server(tls_files: TlsFiles, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """gpusched-server with mutual TLS (client certificates signed by the test CA)."""
    srv = start_server(
        [
            "--tls-cert",
            str(tls_files.server_cert),
            "--tls-key",
            str(tls_files.server_key),
            "--tls-client-ca",
            str(tls_files.ca_cert),
        ],
        tmp_path_factory.mktemp("mtls-server") / "stderr.log",
    )
    yield srv
    srv.stop()


# --- summary -------------------------------------------------------------------------------------


def _shown(path: Path) -> str:
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    files = vector_files()
    counts: dict[str, int] = {}
    for outcome in ("passed", "failed", "skipped", "error"):
        counts[outcome] = sum(
            1
            for r in terminalreporter.stats.get(outcome, [])
            if "test_vectors.py::test_vector[" in getattr(r, "nodeid", "")
        )
    terminalreporter.write_sep(
        "-",
        f"gpusched: {len(files)} test vector file(s) in {_shown(TESTDATA)}; vector runs: "
        + ", ".join(f"{n} {k}" for k, n in counts.items() if n or k == "passed"),
    )
