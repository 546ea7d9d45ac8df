"""Where a browser sign-in comes back to: a listener on this machine's loopback interface.

The browser sign-in (`UserSignIn.login_in_browser`) is the authorization code flow with PKCE of a
public client (RFC 8252): the browser opens the authority's sign-in page and comes back to
`http://localhost:<free port>` (which the app registration must allow), where `LoopbackListener`
takes the answer. It needs a browser on the user's screen, on this machine: `browser_available()`
says whether there is one (see its rule); where there is not (SSH sessions, containers, servers),
the device code flow signs in from any other device.
"""

from __future__ import annotations

import contextlib
import hmac
import html
import logging
import os
import socket
import sys
import threading
import webbrowser
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from app.client.errors import SignInUnavailable, first_line

logger = logging.getLogger(__name__)

#: Environment variables an SSH server sets in the sessions it opens.
SSH_VARIABLES = ("SSH_CONNECTION", "SSH_CLIENT", "SSH_TTY")


def browser_available() -> bool:
    """Whether a web browser the user can see can be opened here, for `login_in_browser`.

    The rule: Python's `webbrowser` module must know a browser (`webbrowser.get()` succeeds; it
    honours `$BROWSER`), and that browser must show on the user's screen. On Linux and the other
    Unix systems that means a graphical session: `DISPLAY` (X11, X forwarding over SSH included)
    or `WAYLAND_DISPLAY` is set; without either (a plain SSH session, a container, a server, WSL
    without WSLg) there is none, since a text-mode browser cannot sign in to Entra. On Windows
    and macOS the desktop has a browser, but not for an SSH session (`SSH_CONNECTION`,
    `SSH_CLIENT` or `SSH_TTY` set): it would open on the remote machine's desktop, if any.
    Where this says False, sign in with the device code flow (`UserSignIn.login`).
    """
    if sys.platform in ("win32", "darwin"):
        if any(os.environ.get(name) for name in SSH_VARIABLES):
            return False
    elif not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        return False
    try:
        webbrowser.get()
    except webbrowser.Error:
        return False
    return True


def open_in_web_browser(url: str) -> None:
    """Open `url` in the user's web browser (the `webbrowser` module); raises `webbrowser.Error`
    when none could be opened."""
    if not webbrowser.open(url):
        raise webbrowser.Error("no web browser could be opened")


#: The largest form post the loopback listener reads (an authorization answer is a few KiB).
_MAX_ANSWER_BYTES = 64 * 1024
_PAGE = (
    "<!DOCTYPE html><html lang=en><head><meta charset=utf-8><title>Anvil sign-in</title></head>"
    "<body><h1>{title}</h1><p>{text}</p></body></html>"
)


def _page(title: str, text: str) -> str:
    return _PAGE.format(title=html.escape(title), text=html.escape(text))


class LoopbackListener:
    """Where the browser brings a sign-in's answer back: an HTTP listener on the loopback
    interface (127.0.0.1, a free port) for one sign-in, serving from threads of its own.

    MSAL's `acquire_token_interactive` drives it as its `auth_code_receiver`: MSAL builds the
    authorization request (PKCE, state, nonce, `response_mode=form_post`), hands its URL and
    state to `get_auth_response`, and redeems the code that comes back. The listener opens the
    browser once it is serving, takes the answer only as a form post carrying that state (a code
    never sits in an address, and a page of another site cannot feed it one), shows the user a
    page, and hands MSAL the answer's fields. Leaving the `with` block stops it and every
    connection it holds, and joins its threads.
    """

    def __init__(self, open_browser: Callable[[str], None], fallback: str) -> None:
        self._open_browser = open_browser
        self._fallback = fallback
        self._lock = threading.Lock()
        self._state: str | None = None
        self._answer: dict[str, str] | None = None
        self._answered = threading.Event()
        self._server = _ListenerServer(self)
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.1}, name="anvil-sign-in-listener"
        )

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def __enter__(self) -> LoopbackListener:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._server.shutdown()
        self._thread.join()
        self._server.close_connections()
        self._server.server_close()

    def get_auth_response(
        self, *, auth_uri: str, state: str | None = None, timeout: float | None = None, **_: object
    ) -> dict[str, str] | None:
        """Open the browser at `auth_uri` and wait for the answer carrying `state`: its fields,
        or None when none came within `timeout` seconds (MSAL then raises its timeout error)."""
        with self._lock:
            self._state = state
        try:
            self._open_browser(auth_uri)
        except (webbrowser.Error, OSError) as error:
            raise SignInUnavailable(
                f"cannot open a web browser here ({first_line(error)}): sign in with `{self._fallback}`"
            ) from None
        self._answered.wait(timeout)
        with self._lock:
            return None if self._answer is None else dict(self._answer)

    def check(self, fields: Mapping[str, str]) -> tuple[int, str, bool]:
        """The status and page for a posted answer, and whether it is this sign-in's answer."""
        if "code" not in fields and "error" not in fields:
            return 400, _page("Not a sign-in answer", "This page only takes a sign-in's answer."), False
        with self._lock:
            expected = self._state
        if expected is None or not hmac.compare_digest(fields.get("state", "").encode(), expected.encode()):
            text = "This answer belongs to another sign-in; Anvil is still waiting for its own."
            return 400, _page("Not this sign-in's answer", text), False
        if "code" in fields:
            text = "You are signed in to Anvil. You can close this tab and go back to the terminal."
            return 200, _page("Signed in", text), True
        reason = first_line(fields.get("error_description") or fields.get("error") or "no reason given")
        return 200, _page("Sign-in failed", f"{fields.get('error')}: {reason}"), True

    def accept(self, fields: Mapping[str, str]) -> None:
        """Keep this sign-in's answer (the first one; its page is already on its way)."""
        with self._lock:
            if self._answer is None:
                self._answer = dict(fields)
        self._answered.set()


class _ListenerServer(HTTPServer):
    """The listener's HTTP server: a thread per connection, each tracked, so that stopping ends
    idle connections a browser opened ahead (instead of waiting for them) and joins them all."""

    #: A free port of its own, never one another socket holds (Windows would allow that).
    allow_reuse_address = False

    def __init__(self, listener: LoopbackListener) -> None:
        super().__init__(("127.0.0.1", 0), _ListenerHandler)
        self.listener = listener
        self._connections: dict[socket.socket, threading.Thread] = {}
        self._connections_lock = threading.Lock()

    def process_request(self, request: Any, client_address: Any) -> None:
        thread = threading.Thread(
            target=self._serve_connection, args=(request, client_address), name="anvil-sign-in-connection"
        )
        with self._connections_lock:
            self._connections[request] = thread
        thread.start()

    def _serve_connection(self, request: Any, client_address: Any) -> None:
        try:
            self.finish_request(request, client_address)
        except Exception as error:  # A browser that went away: nothing to tell anyone.
            logger.debug("sign-in listener connection failed: %s", type(error).__name__)
        finally:
            with self._connections_lock:
                self._connections.pop(request, None)
            self.shutdown_request(request)

    def close_connections(self) -> None:
        """End every connection still open (the server has stopped accepting) and join them."""
        with self._connections_lock:
            connections = list(self._connections.items())
        for connection, _ in connections:
            with contextlib.suppress(OSError):  # already closed by its thread
                connection.shutdown(socket.SHUT_RDWR)
        for _, thread in connections:
            thread.join()


class _ListenerHandler(BaseHTTPRequestHandler):
    server: _ListenerServer
    #: Seconds a connection may stay silent.
    timeout = 30

    def do_POST(self) -> None:
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if not 0 <= length <= _MAX_ANSWER_BYTES:
            self._send(400, _page("Not a sign-in answer", "The request is not a sign-in's answer."))
            return
        body = self.rfile.read(length).decode("utf-8", errors="replace")
        fields = {name: values[0] for name, values in parse_qs(body, keep_blank_values=True).items()}
        status, page, accepted = self.server.listener.check(fields)
        self._send(status, page)
        if accepted:
            self.server.listener.accept(fields)

    def do_GET(self) -> None:
        query = parse_qs(urlsplit(self.path).query)
        if "code" in query or "error" in query:
            text = "Anvil takes a sign-in's answer as a form post only, never in the address."
            self._send(400, _page("Not accepted", text))
        else:
            self._send(404, _page("Nothing here", "This address only takes a sign-in's answer."))

    def _send(self, status: int, page: str) -> None:
        body = page.encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("Content-Security-Policy", "default-src 'none'")
        self.send_header("Referrer-Policy", "no-referrer")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: requests carry authorization codes, which are never logged."""
