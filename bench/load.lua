-- wrk script: POST one MCP tools/call per request. Configured by environment variables:
--   BENCH_FLOW   "modern" (2026-07-28 headers and _meta), "legacy" (tools/call, no version header)
--                or "handshake" (the whole legacy flow, one request each: initialize,
--                notifications/initialized, tools/call with MCP-Protocol-Version 2025-06-18)
--   BENCH_TOKEN  bearer token (optional)
--   BENCH_IDS    number of conversation ids to spread turns over (0: one-shot, no id)
local flow = os.getenv("BENCH_FLOW") or "modern"
local token = os.getenv("BENCH_TOKEN")
local ids = tonumber(os.getenv("BENCH_IDS") or "0")
local counter = 0

wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Accept"] = "application/json, text/event-stream"
if token and token ~= "" then
  wrk.headers["Authorization"] = "Bearer " .. token
end
if flow == "modern" then
  wrk.headers["MCP-Protocol-Version"] = "2026-07-28"
  wrk.headers["Mcp-Method"] = "tools/call"
  wrk.headers["Mcp-Name"] = "ask"
end

local handshake_version = "2025-06-18"

local function headers_with(extra)
  local all = {}
  for name, value in pairs(wrk.headers) do all[name] = value end
  for name, value in pairs(extra) do all[name] = value end
  return all
end

local function handshake_request()
  local phase = counter % 3
  if phase == 1 then
    local body = '{"jsonrpc":"2.0","id":' .. counter .. ',"method":"initialize","params":{"protocolVersion":"'
      .. handshake_version .. '","capabilities":{},"clientInfo":{"name":"bench","version":"1"}}}'
    return wrk.format(nil, nil, headers_with({}), body)
  end
  local versioned = headers_with({["MCP-Protocol-Version"] = handshake_version})
  if phase == 2 then
    return wrk.format(nil, nil, versioned, '{"jsonrpc":"2.0","method":"notifications/initialized"}')
  end
  local args = '"question":"How long does a conversation live?"'
  if ids > 0 then
    args = args .. ',"conversationId":"bench-' .. (counter % ids) .. '"'
  end
  local body = '{"jsonrpc":"2.0","id":' .. counter .. ',"method":"tools/call","params":{"name":"ask",'
    .. '"arguments":{' .. args .. '}}}'
  return wrk.format(nil, nil, versioned, body)
end

function request()
  counter = counter + 1
  if flow == "handshake" then
    return handshake_request()
  end
  local args = '"question":"How long does a conversation live?"'
  if ids > 0 then
    args = args .. ',"conversationId":"bench-' .. (counter % ids) .. '"'
  end
  local meta = ""
  if flow == "modern" then
    meta = ',"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28",'
      .. '"io.modelcontextprotocol/clientCapabilities":{}}'
  end
  local body = '{"jsonrpc":"2.0","id":' .. counter .. ',"method":"tools/call","params":{"name":"ask",'
    .. '"arguments":{' .. args .. '}' .. meta .. '}}'
  return wrk.format(nil, nil, nil, body)
end
