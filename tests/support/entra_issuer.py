"""A local stand-in for Microsoft Entra ID: discovery documents, a key set that rotates, tokens.

It listens on 127.0.0.1 in a background thread and answers what Anvil reads under an authority:

- `/{tenant}/v2.0/.well-known/openid-configuration` (v2 issuer `{authority}/{tenant}/v2.0`);
- `/{tenant}/.well-known/openid-configuration` (v1 issuer `https://sts.windows.net/{tenant}/`,
  as on the public cloud);
- the key set both documents point at, counting every fetch.

For `organizations`/`common` the issuers carry Entra's `{tenantid}` placeholder. Tokens are
minted in both versions and signed with RS256 keys made once per test run (keygen is slow).

It also signs users in the way MSAL talks to Entra, so a real MSAL client can be tested:

- `POST /{tenant}/oauth2/v2.0/devicecode` starts a device code flow; the token endpoint answers
  `authorization_pending` until the test plays the user with `approve(user_code)` (or `decline`);
- `GET /{tenant}/oauth2/v2.0/authorize` (the v2 configuration's `authorization_endpoint`) is the
  sign-in page a browser opens for the authorization code flow: it plays a user who signs in at
  once (the one `sign_in_as` names) and sends the browser back to the client's loopback redirect
  URI with a one-time code, or with `access_denied` after `refuse_next_sign_in()`. It checks the
  request as Entra does for a public client (client id, an `http://localhost` or `127.0.0.1`
  redirect URI with a port, `response_type=code`, a PKCE S256 challenge, a `state`) and answers
  the way `response_mode` asks: a 302 with the fields in the query (the default) or fragment,
  or, for `form_post` (which MSAL uses), a page whose form posts them to the redirect URI;
- `POST /{tenant}/oauth2/v2.0/token` redeems an approved device code, an authorization code
  (once, by the client it was issued to, with the same redirect URI and the PKCE verifier of
  its challenge) or a refresh token (which is rotated on every use, and can be revoked) for an
  access token of the requested API, an `id_token` (carrying the authorization request's
  `nonce`) and the `client_info` MSAL builds its account from.

MSAL only talks to an `https` authority: `EntraIssuer(tls=True)` serves TLS with a certificate
for 127.0.0.1 and localhost, signed by a throwaway CA made once per test run (`ca_file`).

Run as a program (`PYTHONPATH=tests python -m support.entra_issuer --port 8400`) it serves until
interrupted, after printing the settings that point Anvil at it and a token for a local user.
"""

from __future__ import annotations

import argparse
import functools
import json
import signal
import ssl
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from socketserver import BaseRequestHandler
from typing import Any
from urllib.parse import parse_qs

from support.entra_keys import (
    LOCAL_CLIENT_ID,
    LOCAL_TENANT,
    LOCAL_USER_OID,
    MULTI_TENANT,
    EntraKeySet,
    SigningKey,
    signing_key,
)
from support.entra_sign_in import (
    BrowserAnswer,
    EntraSignIn,
    _AuthorizationGrant,
    _BrowserUser,
    _DeviceGrant,
    _RefreshGrant,
)
from support.tls import TlsFiles, tls_files

# --- TLS ---------------------------------------------------------------------------------------


class _TlsServer(ThreadingHTTPServer):
    """Serves HTTPS: each connection's TLS handshake runs in that connection's own thread, so a
    client that never completes one holds up nobody else (and times out)."""

    #: Seconds a connection may stay silent (handshake included) before it is dropped.
    IDLE_TIMEOUT = 10.0

    def __init__(self, address: tuple[str, int], handler: type[BaseRequestHandler], files: TlsFiles) -> None:
        super().__init__(address, handler)
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(files.cert_file, files.key_file)

    def finish_request(self, request: Any, client_address: Any) -> None:
        request.settimeout(self.IDLE_TIMEOUT)
        try:
            with self.context.wrap_socket(request, server_side=True) as tls:
                super().finish_request(tls, client_address)
        except (ssl.SSLError, OSError):
            # A client that gave up or distrusts the certificate: its own error tells the story.
            pass


class EntraIssuer(EntraKeySet, EntraSignIn):
    """A fake Entra authority at `http://127.0.0.1:{port}` (`https://` with `tls=True`);
    `start()`/`stop()` it, or use `with`.

    It can be stopped and started again on the same port (to play an outage), and `publish`
    replaces the key set it serves (to play a key rotation).
    """

    def __init__(
        self,
        *,
        client_id: str,
        keys: Sequence[SigningKey] | None = None,
        port: int | None = None,
        tls: bool = False,
    ) -> None:
        self.client_id = client_id
        #: None until the first `start()` picks a free port (binding port 0 leaves no race).
        self.port = port
        self.tls = tls
        #: Lifetime in seconds of the access tokens the token endpoint issues from now on.
        self.access_token_lifetime = 3600
        self._lock = threading.Lock()
        #: Notified whenever a device code is issued or polled (see `wait_for_device_code`).
        self._changed = threading.Condition(self._lock)
        self._published: list[SigningKey] = list(keys or [signing_key("entra-key-1")])
        self._extra_jwks: list[dict[str, Any]] = []
        self._key_fetches = 0
        self._discovery_fetches = 0
        self._device_grants: dict[str, _DeviceGrant] = {}
        self._refresh_grants: dict[str, _RefreshGrant] = {}
        self._device_flows = 0
        self._device_polls = 0
        self._refreshes = 0
        self._browser_user = _BrowserUser()
        self._refuse_next = False
        self._authorization_grants: dict[str, _AuthorizationGrant] = {}
        self._authorization_requests = 0
        self._code_redemptions = 0
        self._last_authorization: dict[str, str] | None = None
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def authority(self) -> str:
        """`http(s)://127.0.0.1:{port}`: what Anvil's `ANVIL_ENTRA_AUTHORITY` names."""
        if self.port is None:
            raise RuntimeError("the issuer has no port until it is started (or given one)")
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    @property
    def ca_file(self) -> Path:
        """The CA certificate (PEM) that a TLS issuer's certificate chains to: give it to
        `requests` (`verify=`, `REQUESTS_CA_BUNDLE`) or `httpx` (`SSL_CERT_FILE`)."""
        if not self.tls:
            raise RuntimeError("the issuer serves plain http (make it with tls=True)")
        return tls_files().ca_file

    # --- the HTTP server -----------------------------------------------------------------------

    def start(self) -> None:
        """Listen on the issuer's port (again, after `stop`)."""
        if self._server is not None:
            raise RuntimeError("the issuer is already running")
        address, handler = ("127.0.0.1", self.port or 0), _handler_for(self)
        if self.tls:
            server: ThreadingHTTPServer = _TlsServer(address, handler, tls_files())
        else:
            server = ThreadingHTTPServer(address, handler)
        self.port = int(server.server_address[1])
        # Request threads are joined by server_close(), so nothing outlives `stop()`.
        server.daemon_threads = False
        # A short poll interval: `stop()` (an outage, the end of a test) waits for at most one.
        serve = functools.partial(server.serve_forever, poll_interval=0.05)
        thread = threading.Thread(target=serve, name=f"entra-issuer-{self.port}")
        thread.start()
        self._server, self._thread = server, thread

    def stop(self) -> None:
        """Stop listening and join the server thread."""
        server, thread = self._server, self._thread
        self._server = self._thread = None
        if server is not None:
            server.shutdown()
            server.server_close()
        if thread is not None:
            thread.join(timeout=10)

    def __enter__(self) -> EntraIssuer:
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    def document(self, path: str) -> dict[str, Any] | None:
        """The JSON answer for a GET of `path`, or None for a 404."""
        parts = path.split("?", 1)[0].strip("/").split("/")
        if not parts or not parts[0]:
            return None
        tenant, rest = parts[0], "/".join(parts[1:])
        template = "{tenantid}" if tenant in MULTI_TENANT else tenant
        base = f"{self.authority}/{tenant}"
        if rest == "v2.0/.well-known/openid-configuration":
            self._count(discovery=True)
            configuration = self._openid_configuration(
                issuer=self.v2_issuer(template),
                jwks_uri=f"{base}/discovery/v2.0/keys",
                endpoints=f"{base}/oauth2/v2.0",
            )
            return {**configuration, "device_authorization_endpoint": f"{base}/oauth2/v2.0/devicecode"}
        if rest == ".well-known/openid-configuration":
            self._count(discovery=True)
            return self._openid_configuration(
                issuer=self.v1_issuer(template), jwks_uri=f"{base}/discovery/keys", endpoints=f"{base}/oauth2"
            )
        if rest in ("discovery/v2.0/keys", "discovery/keys"):
            self._count(discovery=False)
            return self.jwks()
        return None

    @staticmethod
    def _openid_configuration(*, issuer: str, jwks_uri: str, endpoints: str) -> dict[str, Any]:
        return {
            "issuer": issuer,
            "jwks_uri": jwks_uri,
            "authorization_endpoint": f"{endpoints}/authorize",
            "token_endpoint": f"{endpoints}/token",
            "response_types_supported": ["code", "id_token", "code id_token", "id_token token"],
            "subject_types_supported": ["pairwise"],
            "id_token_signing_alg_values_supported": ["RS256"],
            "scopes_supported": ["openid", "profile", "email", "offline_access"],
        }


def _handler_for(issuer: EntraIssuer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            page = issuer.authorize(self.path)
            if page is not None:
                self._send_page(page)
                return
            document = issuer.document(self.path)
            if document is None:
                self._send(404, {"error": "not_found"})
            else:
                self._send(200, document)

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            fields = parse_qs(self.rfile.read(length).decode(), keep_blank_values=True)
            answer = issuer.post(self.path, {name: values[0] for name, values in fields.items()})
            self._send(answer.status, answer.body)

        def _send(self, status: int, document: Mapping[str, Any]) -> None:
            body = json.dumps(document).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _send_page(self, page: BrowserAnswer) -> None:
            body = page.html.encode()
            self.send_response(page.status)
            if page.location is not None:
                self.send_header("Location", page.location)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Cache-Control", "no-store")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: pytest shows failures, not every request."""

    return Handler


@contextmanager
def running_issuer(client_id: str, **kwargs: Any) -> Iterator[EntraIssuer]:
    """An `EntraIssuer` started for the block and always stopped."""
    issuer = EntraIssuer(client_id=client_id, **kwargs)
    issuer.start()
    try:
        yield issuer
    finally:
        issuer.stop()


def main(argv: Sequence[str] | None = None) -> int:
    """Serve a local issuer until interrupted; print Anvil's settings and a token first."""
    parser = argparse.ArgumentParser(description="A local Entra ID stand-in for trying Anvil's entra mode.")
    parser.add_argument("--port", type=int, default=8400, help="port on 127.0.0.1 (default 8400)")
    parser.add_argument("--tenant", default=LOCAL_TENANT, help="tenant id of the token")
    parser.add_argument("--client-id", default=LOCAL_CLIENT_ID, help="the API app's client id (aud)")
    parser.add_argument("--oid", default=LOCAL_USER_OID, help="object id of the user the token names")
    parser.add_argument("--lifetime", type=int, default=3600, help="token lifetime in seconds")
    args = parser.parse_args(argv)
    issuer = EntraIssuer(client_id=args.client_id, port=args.port)
    # SIGTERM ends the program like Ctrl+C does: through the `finally` that stops the server.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    issuer.start()
    try:
        token = issuer.mint_v2(oid=args.oid, tid=args.tenant, lifetime=args.lifetime)
        sys.stdout.write(
            "ANVIL_AUTH_MODE=entra\n"
            f"ANVIL_ENTRA_AUTHORITY={issuer.authority}\n"
            f"ANVIL_ENTRA_TENANT_ID={args.tenant}\n"
            f"ANVIL_ENTRA_CLIENT_ID={args.client_id}\n"
            f"TOKEN={token}\n"
        )
        sys.stdout.flush()
        sys.stderr.write("Serving until interrupted (Ctrl+C).\n")
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        issuer.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
