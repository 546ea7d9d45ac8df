#!/usr/bin/env bash
# Installs what the benchmarks need besides the project itself: the wrk load generator.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v wrk >/dev/null; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && apt-get install -y -qq wrk >/dev/null
  else
    sudo apt-get update -qq && sudo apt-get install -y -qq wrk >/dev/null
  fi
fi
# The project and its Python dependencies, in .venv (same as ./dev.sh serve).
if [ ! -x .venv/bin/anvil ]; then
  python3 -m venv .venv
  .venv/bin/python -m pip install --quiet -e ".[dev]"
fi
