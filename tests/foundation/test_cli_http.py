"""The CLI's HTTP client (the standard library's http.client) against a real hub: through an HTTP
proxy when the environment names one and not when NO_PROXY exempts the hub, with the proxy's
credentials, and over TLS (certificates checked; a CONNECT tunnel through the proxy)."""

from __future__ import annotations

import datetime
import http.client
import ipaddress
import os
import select
import socket
import ssl
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.support.cli import mycelium
from tests.support.processes import HubProcess

pytestmark = pytest.mark.slow
PROXY_VARIABLES = ("http_proxy", "https_proxy", "all_proxy", "no_proxy")


def cli(url: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k.lower() not in PROXY_VARIABLES}
    return mycelium(*args, url=url, base=base, env={"MYCELIUM_HANDLE": "ana", **env})


class Forwarder(BaseHTTPRequestHandler):
    """Sends each request on to ``upstream`` (or, as a proxy, to the absolute URL it was sent) and
    tunnels CONNECT; records what it saw."""

    upstream: tuple[str, int] | None = None
    seen: list[tuple[str, str, dict[str, str]]]

    def log_message(self, *_args: object) -> None:
        pass

    def do_CONNECT(self) -> None:
        self.seen.append(("CONNECT", self.path, dict(self.headers)))
        host, port = self.path.rsplit(":", 1)
        with socket.create_connection((host, int(port))) as far:
            self.send_response(200)
            self.end_headers()
            self.wfile.flush()
            ends = [self.connection, far]
            while True:
                ready, _, _ = select.select(ends, [], [], 10)
                if not ready:
                    return
                for end in ready:
                    data = end.recv(65536)
                    if not data:
                        return
                    (far if end is self.connection else self.connection).sendall(data)

    def forward(self) -> None:
        self.seen.append((self.command, self.path, dict(self.headers)))
        if self.upstream is not None:
            (host, port), target = self.upstream, self.path
        else:
            parts = urlsplit(self.path)
            host, port = parts.hostname or "", parts.port or 80
            target = parts.path + (f"?{parts.query}" if parts.query else "")
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("proxy-authorization", "connection")}
        conn = http.client.HTTPConnection(host, port, timeout=30)
        conn.request(self.command, target, body=body or None, headers=headers)
        answer = conn.getresponse()
        data = answer.read()
        self.send_response(answer.status)
        for k, v in answer.getheaders():
            if k.lower() not in ("transfer-encoding", "connection", "content-length", "date", "server"):
                self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_DELETE = forward


def serve(upstream: tuple[str, int] | None, tls: ssl.SSLContext | None = None):
    seen: list[tuple[str, str, dict[str, str]]] = []
    handler = type("Handler", (Forwarder,), {"upstream": upstream, "seen": seen})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, seen


@pytest.fixture
def hub(hub_processes) -> HubProcess:
    return hub_processes()


@pytest.fixture
def proxy():
    server, seen = serve(None)
    yield f"http://127.0.0.1:{server.server_address[1]}", seen
    server.shutdown()


def test_the_proxy_the_environment_names_is_used_unless_no_proxy_exempts_the_hub(hub, proxy):
    url, seen = proxy
    created = cli(hub.url, "room", "create", "atlas", HTTP_PROXY=url)
    assert created.returncode == 0, created.stderr
    assert [(m, t) for m, t, _ in seen] == [("POST", f"{hub.url}/api/rooms")]
    listed = cli(hub.url, "room", "search", "-r", "atlas", 'from:ana "a b"', http_proxy=url)
    assert listed.returncode == 0, listed.stderr
    assert seen[-1][1].startswith(f"{hub.url}/api/rooms/atlas/messages/search?q=from%3Aana+%22a+b%22")
    for exempt in ("127.0.0.1", "localhost,127.0.0.1:1234", "*"):
        before = len(seen)
        assert cli(hub.url, "room", "ls", HTTP_PROXY=url, NO_PROXY=exempt).returncode == 0
        assert len(seen) == before, exempt


def test_the_proxy_gets_its_credentials_and_an_unsupported_one_is_named(hub, proxy):
    url, seen = proxy
    with_user = url.replace("http://", "http://ana:s%40cret@")
    assert cli(hub.url, "room", "ls", ALL_PROXY=with_user).returncode == 0
    assert seen[-1][2]["Proxy-Authorization"] == "Basic YW5hOnNAY3JldA=="  # ana:s@cret
    socks = cli(hub.url, "room", "ls", ALL_PROXY="socks5://127.0.0.1:1080")
    assert socks.returncode == 1 and "http:// proxies only" in socks.stderr and "Traceback" not in socks.stderr


def self_signed(folder) -> tuple[str, ssl.SSLContext]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "mycelium test")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(hours=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_file, key_file = folder / "cert.pem", folder / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_file, key_file)
    return str(cert_file), context


def test_https_checks_the_certificate_and_tunnels_through_the_proxy(hub, proxy, tmp_path):
    cert_file, context = self_signed(tmp_path)
    front, _ = serve(("127.0.0.1", hub.port), tls=context)
    try:
        url = f"https://127.0.0.1:{front.server_address[1]}"
        untrusted = cli(url, "room", "ls")
        assert untrusted.returncode == 1 and "cannot reach the hub" in untrusted.stderr
        assert "CERTIFICATE_VERIFY_FAILED" in untrusted.stderr
        trusted = cli(url, "room", "create", "atlas", SSL_CERT_FILE=cert_file)
        assert trusted.returncode == 0, trusted.stderr
        proxy_url, seen = proxy
        tunnelled = cli(url, "room", "ls", SSL_CERT_FILE=cert_file, HTTPS_PROXY=proxy_url)
        assert tunnelled.returncode == 0 and tunnelled.stdout.strip() == "atlas", tunnelled.stderr
        assert [(m, t) for m, t, _ in seen] == [("CONNECT", f"127.0.0.1:{front.server_address[1]}")]
    finally:
        front.shutdown()
