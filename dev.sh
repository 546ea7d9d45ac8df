#!/usr/bin/env bash
# Anvil's two entry points on a fresh machine:
#   ./dev.sh serve   start Anvil on 127.0.0.1:8000 with embedded defaults
#   ./dev.sh test    lint, type-check and run the whole test suite
# Both create .venv at the repository root when missing and install the project into it.
set -euo pipefail
cd "$(dirname "$0")"

VENV=.venv
PY=${PYTHON:-python3}

# Progress on stderr, so that what the commands themselves print stays theirs.
say() { echo "dev.sh: $*" >&2; }

# .venv itself, with uv in it.
make_venv() {
  if ! "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    echo "dev.sh: Python 3.11 or newer is required (set PYTHON=/path/to/python3.11)" >&2
    exit 2
  fi
  if [ ! -x "$VENV/bin/python" ]; then
    say "creating a virtual environment in $VENV ($("$PY" --version))"
    "$PY" -m venv "$VENV"
  fi
  ensure_uv
}

ensure_venv() {
  make_venv
  local stamp
  stamp="$VENV/.installed-$(sha256sum < pyproject.toml | cut -c1-16)"
  if [ ! -f "$stamp" ]; then
    say "installing Anvil and its dependencies into $VENV (once; under a minute)"
    with_heartbeat "installing Anvil's dependencies" uv_install "$VENV" -e ".[dev]"
    rm -f "$VENV"/.installed-*
    touch "$stamp"
    say "installed: $("$VENV/bin/anvil" --version)"
  fi
}

# with_heartbeat WHAT COMMAND...: run COMMAND, saying every 10 s ($HEARTBEAT_TENTHS tenths of a
# second) that WHAT is still going on, so a first install that takes a while is never silent.
HEARTBEAT_TENTHS=${HEARTBEAT_TENTHS:-100}
with_heartbeat() {
  local what=$1 started=$SECONDS pid status=0
  shift
  "$@" &
  pid=$!
  while ! wait_briefly "$pid"; do
    say "... still $what ($((SECONDS - started)) s)"
  done
  wait "$pid" || status=$?
  return "$status"
}

# wait_briefly PID: true once PID has exited, false after a heartbeat's time while it runs.
wait_briefly() {
  local waited=0
  while kill -0 "$1" 2>/dev/null; do
    if [ "$waited" -ge "$HEARTBEAT_TENTHS" ]; then return 1; fi
    sleep 0.1
    waited=$((waited + 1))
  done
  return 0
}

# uv installs the Python packages: it fetches and unpacks them in parallel, several times faster
# than pip. It is itself installed by pip, into .venv.
UV_VERSION=0.13.8
UV="$VENV/bin/uv"
ensure_uv() {
  if [ ! -x "$UV" ] || [ "$("$UV" --version | cut -d' ' -f2)" != "$UV_VERSION" ]; then
    say "installing uv $UV_VERSION into $VENV"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "uv==$UV_VERSION"
  fi
}

# uv_install VENV ARGS...: `pip install ARGS` into VENV, bytecode compiled as pip would (each
# process would otherwise compile what it imports, every time, where PYTHONDONTWRITEBYTECODE is set).
uv_install() {
  local venv=$1
  shift
  "$UV" pip install --quiet --python "$venv/bin/python" --compile-bytecode "$@"
}

# Node tools the tests drive (Cosmos DB-compatible server, MCP conformance suite, TypeScript SDK,
# and Node 22 itself), pinned by package-lock.json.
ensure_node_tools() {
  if ! command -v npm >/dev/null; then
    echo "dev.sh: npm is required for the test tools (install Node.js and npm)" >&2
    exit 2
  fi
  local stamp
  stamp="node_modules/.installed-$(cat package-lock.json | sha256sum | cut -c1-16)"
  if [ ! -f "$stamp" ]; then
    say "installing the Node test tools (npm ci)"
    npm ci --no-audit --no-fund --loglevel=error
    touch "$stamp"
  fi
}

# ensure_tool_venv VENV PACKAGE VERSION: PACKAGE==VERSION installed into a virtual environment of
# its own, VENV, once per version. checkov (the Terraform policy scan in tests/deploy) pins older
# versions of libraries Anvil uses, which would downgrade them in .venv; Sphinx (the sites the
# citation tests build) pins a docutils older than the one Anvil reads reStructuredText with.
ensure_tool_venv() {
  local venv=$1 package=$2 version=$3
  local stamp="$venv/.installed-$version"
  if [ ! -f "$stamp" ]; then
    say "installing $package $version into $venv"
    [ -x "$venv/bin/python" ] || "$UV" venv --quiet --python "$PY" "$venv"
    uv_install "$venv" "$package==$version"
    rm -f "$venv"/.installed-*
    touch "$stamp"
  fi
}

case "${1:-}" in
  serve)
    shift
    ensure_venv
    say "starting Anvil on embedded defaults (SQLite history in ${ANVIL_DATA_DIR:-.anvil}/, answers from docs/, local dev sign-in); Ctrl-C stops it"
    # Logs a person reads, unless asked for JSON.
    ANVIL_LOG_FORMAT="${ANVIL_LOG_FORMAT:-text}" exec "$VENV/bin/anvil" serve "$@"
    ;;
  test)
    shift
    # npm fetches the Node tools and uv installs checkov while the Python packages install.
    ensure_node_tools &
    node_tools=$!
    make_venv
    ensure_tool_venv .venv-checkov checkov 3.3.30 &
    checkov=$!
    ensure_tool_venv .venv-sphinx sphinx 9.0.4 &
    sphinx=$!
    ensure_venv
    wait "$checkov"
    wait "$sphinx"
    wait "$node_tools"
    export PATH="$PWD/$VENV/bin:$PATH"
    echo "== ruff"
    ruff check app tests bench .ci
    ruff format --check app tests bench .ci
    echo "== file sizes"
    python .ci/file_sizes.py
    # mypy runs beside pytest, whose workers spend a third of their time waiting for servers and
    # deadlines; its report follows pytest's, and either failing fails the run.
    mypy_log=$(mktemp)
    trap 'rm -f "$mypy_log"' EXIT
    mypy > "$mypy_log" 2>&1 &
    mypy_pid=$!
    echo "== pytest"
    python -m compileall -q -j 0 app
    # One worker per core, at least two. More do not help on two cores: measured with 4, the
    # suite took as long (336 s against 325 s) for a quarter more CPU. A worker that runs out of
    # tests takes some of the other's (worksteal), so a few long tests at the end of one
    # worker's share no longer keep the run waiting: 256 s against 325 s.
    pytest_status=0
    pytest -n "$(python -c 'import os; print(max(2, os.cpu_count() or 1))')" --dist worksteal "$@" ||
      pytest_status=$?
    mypy_status=0
    wait "$mypy_pid" || mypy_status=$?
    echo "== mypy (strict)"
    cat "$mypy_log"
    if [ "$pytest_status" -ne 0 ]; then exit "$pytest_status"; fi
    exit "$mypy_status"
    ;;
  *)
    echo "usage: ./dev.sh serve [--host H] [--port P] | ./dev.sh test [pytest args]" >&2
    exit 2
    ;;
esac
