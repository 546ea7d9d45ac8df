#!/usr/bin/env bash
# Fetches the documentation sets bench/eval.py scores besides the shared ones and Anvil's own docs,
# into DIR (default .anvil/eval-sets): undici's docs (an HTTP client for Node.js, MIT licence) as
# the pinned release on the npm registry ships them, for bench/questions/undici.json. A set
# already there at its pinned release is kept.
#
#     bench/eval_sets.sh [DIR] && .venv/bin/python bench/eval.py \
#         --corpus .anvil/eval-sets/undici-docs --questions bench/questions/undici.json
set -euo pipefail
cd "$(dirname "$0")/.."
UNDICI=8.12.4
sets=${1:-.anvil/eval-sets}
target=$sets/undici-docs
stamp=$sets/undici.version
if [ -d "$target" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$UNDICI" ]; then
  exit 0
fi
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
(cd "$scratch" && npm pack --silent "undici@$UNDICI" >/dev/null && tar xzf "undici-$UNDICI.tgz")
if [ ! -d "$scratch/package/docs/docs" ]; then
  echo "eval_sets: undici $UNDICI holds no docs/docs folder" >&2
  exit 1
fi
rm -rf "$target"
mkdir -p "$target"
cp -R "$scratch/package/docs/docs/." "$target/"
echo "$UNDICI" >"$stamp"
echo "undici $UNDICI docs: $(find "$target" -name '*.md' | wc -l) pages in $target"
