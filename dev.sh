#!/usr/bin/env bash
# Anvil's two entry points on a fresh machine:
#   ./dev.sh serve   start Anvil on 127.0.0.1:8000 with embedded defaults
#   ./dev.sh test    lint, type-check and run the whole test suite
# Both create .venv at the repository root when missing and install the project into it.
set -euo pipefail
cd "$(dirname "$0")"

VENV=.venv
PY=${PYTHON:-python3}

ensure_venv() {
  if ! "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    echo "dev.sh: Python 3.11 or newer is required (set PYTHON=/path/to/python3.11)" >&2
    exit 2
  fi
  [ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
  local stamp
  stamp="$VENV/.installed-$(cat pyproject.toml | sha256sum | cut -c1-16)"
  if [ ! -f "$stamp" ]; then
    "$VENV/bin/python" -m pip install --quiet --upgrade pip
    "$VENV/bin/python" -m pip install --quiet -e ".[dev]"
    rm -f "$VENV"/.installed-*
    touch "$stamp"
  fi
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
    npm ci --no-audit --no-fund --loglevel=error
    touch "$stamp"
  fi
}

# checkov (the Terraform policy scan in tests/deploy) in a virtual environment of its own: it pins
# older versions of libraries Anvil uses, which would downgrade them in .venv.
CHECKOV_VENV=.venv-checkov
CHECKOV_VERSION=3.3.30
ensure_checkov() {
  local stamp="$CHECKOV_VENV/.installed-$CHECKOV_VERSION"
  if [ ! -f "$stamp" ]; then
    [ -x "$CHECKOV_VENV/bin/python" ] || "$PY" -m venv "$CHECKOV_VENV"
    "$CHECKOV_VENV/bin/python" -m pip install --quiet "checkov==$CHECKOV_VERSION"
    rm -f "$CHECKOV_VENV"/.installed-*
    touch "$stamp"
  fi
}

case "${1:-}" in
  serve)
    shift
    ensure_venv
    exec "$VENV/bin/anvil" serve "$@"
    ;;
  test)
    shift
    ensure_venv
    ensure_node_tools
    ensure_checkov
    export PATH="$PWD/$VENV/bin:$PATH"
    echo "== ruff"
    ruff check app tests bench
    ruff format --check app tests bench
    echo "== mypy (strict)"
    mypy
    echo "== pytest"
    pytest "$@"
    # The MCP single-exchange fast path is optional: the suite passes without it too. The
    # deployment checks (tests/deploy) never start a server on it, so they run once.
    echo "== pytest, with ANVIL_MCP_SINGLE_EXCHANGE=false"
    ANVIL_MCP_SINGLE_EXCHANGE=false exec pytest --ignore=tests/deploy "$@"
    ;;
  *)
    echo "usage: ./dev.sh serve [--host H] [--port P] | ./dev.sh test [pytest args]" >&2
    exit 2
    ;;
esac
