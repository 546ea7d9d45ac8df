"""`anvil` commands as real processes without paying for the interpreter's imports each time.

An `anvil ask` or `anvil bridge` spends most of its CPU importing (the MCP SDK, MSAL, httpx); a
test that runs dozens of them pays that dozens of times. Here one process imports all of it once
and forks a child for every command. The child is a process of its own: it gets the caller's
stdin, stdout and stderr (the file descriptors themselves, passed over a Unix socket), its
arguments, environment, working folder and umask, runs `app.cli.main` and leaves through the
interpreter's own exit, so its exit status, output and signals are what the caller sees.

`preloaded_anvil_command()` is a drop-in for `support.anvil_server.anvil_command()`: a small
relay (a Python started without `site`, importing nothing but the standard library) that hands
the command over, passes on the signals it gets, and exits as the command did. What a forked
child does not repeat is the interpreter's start-up (imports, stdio set up from PYTHON*
variables), so tests of start-up, closed pipes and signal dispositions run the console script.

Only on Linux (fork, file descriptor passing, pidfd); elsewhere the console script runs.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import select
import signal
import socket
import sys
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import subprocess

# The relay imports this module too, so what only the caller's side needs is imported there.

#: What a command imports lazily, imported once before any fork.
PRELOADED = (
    "app.cli.main",
    "app.cli.commands",
    "app.settings",
    "app.devkey",
    "app.client.bridge",
    "app.client.discovery",
    "app.client.errors",
    "app.client.rest",
    "app.client.signin",
    "app.client.tokens",
    "anyio",
    "httpx",
    # `anvil serve`: the server's libraries, about 1.9 s of CPU for every server a test starts.
    "app.serve.server",
    "app.main",
    "app.lifespan",
    "app.stores.sqlite",
    "uvicorn",
    "uvloop",
    "httptools",
)
#: Signals the relay passes on to the command, as a terminal or a host would send them.
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
MAX_MESSAGE = 1 << 20
READY = b"ready\n"

# --- the caller's side ---------------------------------------------------------------------------


class _Preloader:
    """The forking process of this test process (one, started on first use, reaped at exit)."""

    process: subprocess.Popen[bytes]

    def __init__(self) -> None:
        import subprocess
        import tempfile

        self.folder = tempfile.mkdtemp(prefix="anvil-preload-")  # short: a socket path has ~100 bytes
        self.socket_path = os.path.join(self.folder, "s")
        self.process = subprocess.Popen(
            [sys.executable, __file__, "serve", self.socket_path],
            stdin=subprocess.PIPE,  # its end of life: it exits when this pipe closes
            stdout=subprocess.PIPE,
        )
        assert self.process.stdout is not None
        ready = self.process.stdout.readline()
        if ready != READY:
            self.stop()
            raise RuntimeError(f"the preloaded anvil did not start: {ready!r}")

    def stop(self) -> None:
        import shutil
        import subprocess

        for pipe in (self.process.stdin, self.process.stdout):
            if pipe is not None:
                pipe.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        shutil.rmtree(self.folder, ignore_errors=True)


_preloader: _Preloader | None = None
_lock = threading.Lock()


def supported() -> bool:
    return sys.platform == "linux" and hasattr(os, "pidfd_open") and hasattr(socket, "send_fds")


def preloaded_anvil_command() -> list[str]:
    """The command that runs `anvil ARGS` (append ARGS) in a child of the preloaded process."""
    global _preloader
    if not supported():
        from support.anvil_server import anvil_command

        return anvil_command()
    with _lock:
        if _preloader is None:
            import atexit

            _preloader = _Preloader()
            atexit.register(_preloader.stop)
        path = _preloader.socket_path
    # -I -S: the relay needs the standard library only, and starts in milliseconds without site.
    return [sys.executable, "-I", "-S", __file__, "run", path]


# --- the relay -----------------------------------------------------------------------------------


def _relay(socket_path: str, args: list[str]) -> None:
    """Hand `anvil ARGS` over with this process's stdio, then exit as it did."""
    umask = os.umask(0)
    os.umask(umask)
    request = {"argv": args, "env": dict(os.environ), "cwd": os.getcwd(), "umask": umask}
    pending: list[int] = []
    child: list[int] = []

    def forward(signum: int, _frame: object) -> None:
        if child:
            os.kill(child[0], signum)
        else:
            pending.append(signum)

    for signum in FORWARDED:
        signal.signal(signum, forward)
    stdio = [fd if _is_open(fd) else os.open(os.devnull, os.O_RDWR) for fd in (0, 1, 2)]
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as conn:
        conn.connect(socket_path)
        socket.send_fds(conn, [json.dumps(request).encode()], stdio)
        status: int | None = None
        while status is None:
            message = conn.recv(MAX_MESSAGE)
            if not message:
                sys.stderr.write("anvil (preloaded): the forking process went away\n")
                sys.exit(255)
            answer = json.loads(message)
            if "pid" in answer:
                child.append(answer["pid"])
                for queued in pending:
                    os.kill(child[0], queued)
            else:
                status = answer["status"]
    if status >= 0:
        sys.exit(status)
    # Killed by a signal: die of the same one, so the caller sees a negative return code.
    signal.signal(-status, signal.SIG_DFL)
    os.kill(os.getpid(), -status)
    sys.exit(128 - status)


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


# --- the forking process -------------------------------------------------------------------------


def _serve(socket_path: str) -> None:
    """Import everything once, then fork a command for each connection until stdin closes."""
    import gc
    import importlib

    for name in PRELOADED:
        importlib.import_module(name)
    if threading.active_count() != 1:
        raise RuntimeError("a preloaded module started a thread; forking it would be unsafe")
    # The children of a command (this one's grandchildren) are reaped by it; those of this one
    # (each waiting for a command) by the kernel.
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    gc.collect()
    gc.freeze()  # shared with every child until it writes, instead of copied on the first collection
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as listener:
        listener.bind(socket_path)
        listener.listen(64)
        os.write(1, READY)
        while True:
            readable, _, _ = select.select([listener, sys.stdin], [], [])
            if sys.stdin in readable and not os.read(0, 1):
                return
            if listener in readable:
                conn, _ = listener.accept()
                message, fds, _, _ = socket.recv_fds(conn, MAX_MESSAGE, 3)
                if os.fork() == 0:
                    listener.close()
                    _watch(conn, json.loads(message), fds)  # never returns
                conn.close()
                for fd in fds:
                    os.close(fd)


def _watch(conn: socket.socket, request: dict[str, object], fds: list[int]) -> None:
    """In a child: fork the command, tell the relay its pid, then its exit status."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    pid = os.fork()
    if pid == 0:
        conn.close()
        _command(request, fds)  # never returns
    for fd in fds:
        os.close(fd)
    conn.send(json.dumps({"pid": pid}).encode())
    try:
        exited = os.pidfd_open(pid)
    except OSError:  # a kernel before 5.3: no watching for the relay, only for the command
        pass
    else:
        readable, _, _ = select.select([conn.fileno(), exited], [], [])
        if exited not in readable:  # the relay is gone (killed): so is what it ran
            os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    with contextlib.suppress(OSError):  # the relay is gone: nobody to tell
        conn.send(json.dumps({"status": code}).encode())
    os._exit(0)


def _command(request: dict[str, object], fds: list[int]) -> None:
    """Become `anvil ARGV`: the relay's stdio, environment, folder and umask, then `main`."""
    env = request["env"]
    argv = request["argv"]
    assert isinstance(env, dict) and isinstance(argv, list)
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(str(request["cwd"]))
    os.umask(int(str(request["umask"])))
    os.environ.clear()
    os.environ.update(env)
    _new_stdio(unbuffered=bool(env.get("PYTHONUNBUFFERED")))
    sys.argv = [os.path.join(os.path.dirname(sys.executable), "anvil"), *argv]
    sys.path[0] = os.path.dirname(sys.argv[0])  # where the console script runs from

    from app.cli.main import main

    sys.exit(main())


def _new_stdio(*, unbuffered: bool) -> None:
    """Standard streams on the new descriptors 0-2, made as the interpreter makes them."""
    made = []
    for fd, old in ((0, sys.__stdin__), (1, sys.__stdout__), (2, sys.__stderr__)):
        assert old is not None
        raw = io.FileIO(fd, "rb" if fd == 0 else "wb", closefd=False)
        buffered: Any = raw
        if fd == 0:
            buffered = io.BufferedReader(raw)
        elif not unbuffered:
            buffered = io.BufferedWriter(raw)
        made.append(
            io.TextIOWrapper(
                buffered,
                encoding=old.encoding,
                errors=old.errors,
                line_buffering=fd == 2 or (fd == 1 and os.isatty(1)),
                write_through=unbuffered and fd != 0,
            )
        )
    sys.stdin, sys.stdout, sys.stderr = made
    sys.__stdin__, sys.__stdout__, sys.__stderr__ = made  # type: ignore[misc]


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        _serve(sys.argv[2])
    else:
        _relay(sys.argv[2], sys.argv[3:])
