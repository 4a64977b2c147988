-- Client-side filter (before the gRPC-JSON transcoder): the OpenAI REST
-- conventions the transcoder lacks. Only what a proxy must do; the pieces
-- live in their own modules (stream_select, openai_error, ...),
-- bundled with this file by tokenwire.gateway.lua_bundle.
--
-- Request: a body whose top-level values have the wrong JSON kind is
-- refused with 400 before the transcoder could coerce it (strict_types.lua,
-- rules generated from the descriptor); a body without an X-Session-ID
-- header gets its affinity key header (affinity_key.lua); a streaming body
-- goes to the streaming method's binding (stream_select.lua). Every REST call is marked in dynamic metadata
-- "tokenwire.rest" (mode "json", "sse", or "list": a body that is a JSON list,
-- list_body.lua); native gRPC calls are left alone.
--
-- Response (REST calls only): grpc-* and tokenwire-* headers are dropped;
-- a failed call (status recorded by grpc_status.lua) becomes OpenAI's error
-- body with the HTTP status of the gRPC code and retry-after headers
-- (openai_error.lua); a stream's Server-Sent Events come rendered by the
-- server (EventStreamService) and pass through untouched.
local stream_select = require("stream_select")
local openai_error = require("openai_error")
local anthropic_error = require("anthropic_error")
local strict_types = require("strict_types")
local list_body = require("list_body")
local affinity_key = require("affinity_key")
local strict_rules = require("strict_rules") -- generated from the proto descriptor
local wire = require("wire") -- generated from tokenwire/wire.py: names shared with client and server
local names = require("gateway_names") -- generated: names shared with the config builder

local NS = names.REST_METADATA
local UPSTREAM_HEADERS = {
  "grpc-status", "grpc-message", "grpc-status-details-bin", "grpc-accept-encoding",
  "grpc-encoding", wire.REASON_TRAILER, wire.PARAM_TRAILER, wire.RETRY_TRAILER,
}

function envoy_on_request(handle)
  local headers = handle:headers()
  local ctype = headers:get("content-type") or ""
  if ctype:sub(1, 16) == "application/grpc" then
    return -- native gRPC pass-through
  end
  local mode = "json"
  local method, full_path = headers:get(":method"), headers:get(":path") or ""
  local text -- the body, read once, only where a rule or the stream flag needs it
  local function body_text()
    if text == nil then
      local body = handle:body()
      text = body and body:getBytes(0, body:length()) or ""
    end
    return text
  end
  if method == "POST" and full_path:match("^([^?]*)") == stream_select.INVOCATIONS then
    -- SageMaker's /invocations: a chat or a completion, by the body's keys
    local routed = stream_select.invocation_path(full_path, body_text())
    if routed == nil then
      handle:respond({ [":status"] = "400" }, stream_select.INVOCATION_ERROR)
      return
    end
    full_path = routed
    handle:headers():replace(":path", full_path)
  end
  local rules = method == "POST" and strict_rules[full_path:match("^([^?]*)")] or nil
  if rules ~= nil then
    local key, kind = strict_types.violation(body_text(), rules)
    if key ~= nil then -- the transcoder would coerce it: refuse as OpenAI does
      -- Envoy's local-reply mapper renders it (local_replies.py: param = this field).
      handle:streamInfo():dynamicMetadata():set(NS, names.STRICT_PARAM, key)
      handle:respond({ [":status"] = "400" }, strict_types.message(key, kind))
      return
    end
  end
  local now = handle:headers() -- fresh: reading the body ends the old object's scope
  if rules ~= nil and now:get(wire.SESSION_HEADER) == nil then
    -- The fleet's consistent hash (config.py) keys on X-Session-ID, else on
    -- this header: a router's session key the trainer sent (slime's
    -- X-SMG-Routing-Key), else derived from the body (session_id, cache_salt,
    -- user); a caller's own copy of it was dropped on arrival (config.py).
    local key = nil
    for _, name in ipairs(wire.ROUTING_KEY_HEADERS) do
      key = key or now:get(name)
    end
    key = key or affinity_key.key(body_text())
    if key ~= nil then
      now:add(affinity_key.HEADER, key)
      handle:clearRouteCache()
    end
  end
  local path, path_mode = stream_select.stream_path(method, full_path, body_text)
  if path ~= nil then
    mode = path_mode
    handle:headers():replace(":path", path)
  elseif list_body.field(full_path) ~= nil then
    mode = "list"
    handle:streamInfo():dynamicMetadata():set(NS, "list_field", list_body.field(full_path))
  end
  handle:streamInfo():dynamicMetadata():set(NS, "mode", mode)
  if anthropic_error.applies(full_path) then -- the Messages API: Anthropic's error shape
    handle:streamInfo():dynamicMetadata():set(NS, "anthropic", "1")
  end
end

local function send_error(handle, rec)
  local render = rec["anthropic"] ~= nil and anthropic_error.render or openai_error.render
  local http, body, retry_ms = render(rec)
  handle:body(true):setBytes(body)
  local headers = handle:headers()
  headers:replace(":status", tostring(http))
  headers:replace("content-type", "application/json")
  headers:replace("content-length", tostring(#body))
  if retry_ms ~= nil then -- what HTTP clients (the openai SDK) read
    headers:replace(wire.RETRY_TRAILER, tostring(retry_ms))
    headers:replace(wire.RETRY_AFTER_HEADER, tostring(math.ceil(retry_ms / 1000)))
  end
end

local function name_rejected_field(handle)
  local body = handle:body()
  if body == nil then
    return
  end
  local text = openai_error.name_rejected_field(body:getBytes(0, body:length()))
  if text ~= nil then
    body:setBytes(text)
    handle:headers():replace("content-length", tostring(#text))
  end
end

function envoy_on_response(handle)
  local rest = handle:streamInfo():dynamicMetadata():get(NS)
  if rest == nil then
    return -- native gRPC pass-through
  end
  local headers = handle:headers()
  for _, name in ipairs(UPSTREAM_HEADERS) do
    headers:remove(name)
  end
  local status = rest["grpc_status"]
  if status ~= nil and status ~= "0" then
    send_error(handle, rest) -- failed before any response message: an HTTP error
    return
  end
  if status == nil and headers:get(":status") == "400" then
    name_rejected_field(handle)
    return
  end
  if rest["mode"] == "list" and headers:get(":status") == "200" then
    local body = handle:body()
    local text = body and list_body.unwrap(body:getBytes(0, body:length()), rest["list_field"])
    if text ~= nil then
      body:setBytes(text)
      -- headers fetched before the body was buffered are out of scope now
      handle:headers():replace("content-length", tostring(#text))
    end
    return
  end
  if rest["mode"] ~= "sse" or headers:get(":status") ~= "200" then
    return -- a unary response, or one of Envoy's own (already OpenAI-shaped) errors
  end
  -- The server wrote the events (EventStreamService: "data: {json}", an
  -- error event, "data: [DONE]"); the transcoder passes its HttpBody bytes
  -- through, so no chunk passes through Lua.
  headers:replace("content-type", "text/event-stream")
  headers:replace("cache-control", "no-cache")
  headers:remove("content-length")
end
