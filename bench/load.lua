-- wrk script: POST one MCP tools/call per request. Configured by environment variables:
--   BENCH_FLOW   "modern" (2026-07-28 headers and _meta) or "legacy" (no version header)
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

function request()
  counter = counter + 1
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
