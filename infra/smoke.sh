#!/usr/bin/env bash
# Smoke-test a running Anvil, local or deployed, from the outside.
#
#   infra/smoke.sh URL [TOKEN]
#
# URL is the server's base URL (https://anvil.example.com or http://127.0.0.1:8000; a trailing
# /mcp is accepted). TOKEN is an access token (`anvil token --user NAME` for dev sign-in, an
# Entra token otherwise); it may also come from ANVIL_TOKEN. Leave it out when sign-in is off.
#
# Checks, one line each, stopping at the first failure (exit 1):
#   health            GET /healthz is 200 {"status": "ok"}
#   ready             GET /readyz is 200 (store and signing keys reachable)
#                     (both skipped when a gateway in front does not publish them: 404)
#   resource metadata GET /.well-known/oauth-protected-resource/mcp names <URL>/mcp
#                     (skipped when the server says sign-in is off: 404)
#   no token          POST /mcp without a token is 401 with a resource_metadata challenge
#                     (only when sign-in is on)
#   2026-07-28 ask    one self-contained tools/call of `ask`
#   legacy ask        initialize, then tools/call of `ask` with the negotiated version
#   conversation      turn 1 (2026-07-28) then turn 2 (legacy) under a random conversationId;
#                     with sign-in off, checks that the answer is one-shot instead
#
# Needs bash, curl, python3 (only to read JSON) and the usual coreutils. SMOKE_TIMEOUT sets the per-request timeout in
# seconds (default 30).
set -euo pipefail

if [[ $# -lt 1 || $# -gt 2 || $1 == -h || $1 == --help ]]; then
  echo "usage: infra/smoke.sh URL [TOKEN]   (e.g. infra/smoke.sh http://127.0.0.1:8000 \"\$TOKEN\")" >&2
  exit 2
fi
for tool in curl python3; do
  if ! command -v "$tool" >/dev/null; then
    echo "smoke: $tool is required" >&2
    exit 2
  fi
done

BASE=${1%/}
BASE=${BASE%/mcp}
TOKEN=${2:-${ANVIL_TOKEN:-}}
TIMEOUT=${SMOKE_TIMEOUT:-30}
MODERN=2026-07-28
LEGACY=2025-11-25
ACCEPT='Accept: application/json, text/event-stream'
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
CHECK=setup
STATUS=000
ANSWER=

ok() { printf 'ok    %s: %s\n' "$CHECK" "$*"; }
skip() { printf 'skip  %s: %s\n' "$CHECK" "$*"; }

# fail REASON [BODY_FILE]: report the current check as failed, show the response, and stop.
fail() {
  printf 'FAIL  %s: %s\n' "$CHECK" "$1"
  if [[ -n ${2:-} && -s $2 ]]; then
    printf '      response: %s\n' "$(head -c 600 "$2" | tr '\n' ' ')"
  fi
  exit 1
}

# json_get FILE PATH: print the value at a dotted PATH (keys, or list indexes) of the JSON in FILE;
# strings print bare, anything else as JSON. Fails when the file is not JSON or the path is absent.
json_get() {
  python3 -c '
import json, sys
try:
    with open(sys.argv[1], encoding="utf-8") as f:
        value = json.load(f)
    for key in sys.argv[2].split("."):
        value = value[int(key)] if isinstance(value, list) else value[key]
except (OSError, ValueError, LookupError, TypeError):
    sys.exit(1)
print(value if isinstance(value, str) else json.dumps(value))
' "$1" "$2"
}

# expect FILE PATH VALUE: fail unless the JSON value at PATH prints as VALUE.
expect() {
  local actual
  actual=$(json_get "$1" "$2") || fail "the response has no $2" "$1"
  [[ $actual == "$3" ]] || fail "$2 is $actual, expected $3" "$1"
}

# request METHOD URL OUT [CURL_ARGS...]: send one request; STATUS gets the HTTP status and OUT the body.
request() {
  local method=$1 url=$2 out=$3
  shift 3
  if ! STATUS=$(curl -sS --max-time "$TIMEOUT" -X "$method" -o "$out" -w '%{http_code}' "$@" "$url" \
    2>"$WORK/curl.err"); then
    fail "no answer from $url: $(tr '\n' ' ' <"$WORK/curl.err")"
  fi
}

# mcp OUT BODY [HEADER...]: POST one JSON-RPC message to /mcp, with the token when there is one.
mcp() {
  local out=$1 body=$2
  shift 2
  local auth=()
  [[ -n $TOKEN ]] && auth=(-H "Authorization: Bearer $TOKEN")
  request POST "$BASE/mcp" "$out" ${auth[@]+"${auth[@]}"} -H 'Content-Type: application/json' \
    -H "$ACCEPT" "$@" --data-binary "$body"
}

# ask_modern OUT ARGUMENTS_JSON: a self-contained 2026-07-28 tools/call of `ask`.
ask_modern() {
  mcp "$1" '{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "ask",
    "arguments": '"$2"', "_meta": {"io.modelcontextprotocol/protocolVersion": "'"$MODERN"'",
    "io.modelcontextprotocol/clientCapabilities": {}}}}' \
    -H "MCP-Protocol-Version: $MODERN" -H 'Mcp-Method: tools/call' -H 'Mcp-Name: ask'
}

# ask_legacy OUT ARGUMENTS_JSON VERSION: a legacy tools/call of `ask` under VERSION.
ask_legacy() {
  mcp "$1" '{"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "ask",
    "arguments": '"$2"'}}' -H "MCP-Protocol-Version: $3"
}

# answered OUT: fail unless OUT is a 200 tool result with an answer; ANSWER gets the answer.
answered() {
  if json_get "$1" error.code >/dev/null; then
    fail "HTTP $STATUS, JSON-RPC error $(json_get "$1" error.code): $(json_get "$1" error.message)" "$1"
  fi
  [[ $STATUS == 200 ]] || fail "HTTP $STATUS" "$1"
  [[ $(json_get "$1" result.isError || echo false) == false ]] || fail "the tool reported an error" "$1"
  ANSWER=$(json_get "$1" result.structuredContent.answer) || fail "no structuredContent.answer" "$1"
  [[ -n $ANSWER ]] || fail "the answer is empty" "$1"
  local text
  text=$(json_get "$1" result.content.0.text) || fail "no text content" "$1"
  [[ $text == "$ANSWER" ]] || fail "the text content differs from structuredContent.answer" "$1"
}

CHECK=health
request GET "$BASE/healthz" "$WORK/health"
if [[ $STATUS == 404 ]]; then
  skip "GET /healthz is 404: not published here (a gateway in front keeps the probes private)"
else
  [[ $STATUS == 200 ]] || fail "GET /healthz is HTTP $STATUS" "$WORK/health"
  expect "$WORK/health" status ok
  ok "GET /healthz is 200 {\"status\": \"ok\"}"
fi

CHECK=ready
request GET "$BASE/readyz" "$WORK/ready"
if [[ $STATUS == 404 ]]; then
  skip "GET /readyz is 404: not published here (a gateway in front keeps the probes private)"
else
  [[ $STATUS == 200 ]] || fail "GET /readyz is HTTP $STATUS (a dependency is not reachable)" "$WORK/ready"
  ok "GET /readyz is 200, checks $(json_get "$WORK/ready" checks || echo '{}')"
fi

CHECK="resource metadata"
request GET "$BASE/.well-known/oauth-protected-resource/mcp" "$WORK/metadata"
SIGN_IN=on
case $STATUS in
  200)
    expect "$WORK/metadata" resource "$BASE/mcp"
    servers=$(json_get "$WORK/metadata" authorization_servers) || fail "no authorization_servers" "$WORK/metadata"
    ok "names $BASE/mcp, authorization servers $servers"
    ;;
  404)
    SIGN_IN=off
    skip "sign-in is off on this server (404), so there is no resource metadata"
    ;;
  *) fail "HTTP $STATUS" "$WORK/metadata" ;;
esac

CHECK="no token"
if [[ $SIGN_IN == on ]]; then
  request POST "$BASE/mcp" "$WORK/anonymous" -D "$WORK/anonymous.headers" -H 'Content-Type: application/json' \
    -H "$ACCEPT" --data-binary '{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}'
  [[ $STATUS == 401 ]] || fail "POST /mcp without a token is HTTP $STATUS, expected 401" "$WORK/anonymous"
  challenge=$(tr -d '\r' <"$WORK/anonymous.headers" | sed -n 's/^[Ww][Ww][Ww]-[Aa]uthenticate: *//p')
  [[ $challenge == Bearer*resource_metadata=* ]] ||
    fail "the 401 challenge lacks resource_metadata (clients cannot find sign-in): '$challenge'"
  ok "401, $challenge"
  [[ -n $TOKEN ]] || fail "sign-in is on: pass an access token as the second argument (or ANVIL_TOKEN)"
else
  skip "sign-in is off, every caller is anonymous"
fi

CHECK="$MODERN ask"
ask_modern "$WORK/modern" '{"question": "What is Anvil?"}'
answered "$WORK/modern"
ok "tools/call answered without a handshake (${#ANSWER} characters)"

CHECK="legacy ask"
mcp "$WORK/initialize" '{"jsonrpc": "2.0", "id": 2, "method": "initialize", "params": {
  "protocolVersion": "'"$LEGACY"'", "capabilities": {}, "clientInfo": {"name": "smoke", "version": "1"}}}'
[[ $STATUS == 200 ]] || fail "initialize is HTTP $STATUS" "$WORK/initialize"
expect "$WORK/initialize" result.serverInfo.name anvil
version=$(json_get "$WORK/initialize" result.protocolVersion) || fail "initialize has no protocolVersion" \
  "$WORK/initialize"
ask_legacy "$WORK/legacy" '{"question": "What is Anvil?"}' "$version"
answered "$WORK/legacy"
ok "initialize negotiated $version, then tools/call answered (${#ANSWER} characters)"

CHECK=conversation
conversation="smoke-$(python3 -c 'import uuid; print(uuid.uuid4().hex)')"
ask_modern "$WORK/turn1" '{"question": "What is Anvil?", "conversationId": "'"$conversation"'"}'
answered "$WORK/turn1"
if [[ $SIGN_IN == off ]]; then
  expect "$WORK/turn1" result.structuredContent.turn null
  ok "sign-in is off, so a conversationId is answered one-shot and nothing is stored"
  exit 0
fi
expect "$WORK/turn1" result.structuredContent.conversationId "$conversation"
expect "$WORK/turn1" result.structuredContent.turn 1
expect "$WORK/turn1" result.structuredContent.created true
ask_legacy "$WORK/turn2" '{"question": "How long does it keep it?", "conversationId": "'"$conversation"'"}' \
  "$version"
answered "$WORK/turn2"
expect "$WORK/turn2" result.structuredContent.turn 2
expect "$WORK/turn2" result.structuredContent.created false
ok "$conversation: turn 1 over $MODERN, turn 2 over $version"
