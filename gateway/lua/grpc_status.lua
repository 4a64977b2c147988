-- Upstream-side filter (between the gRPC-JSON transcoder and the router).
--
-- It sees the raw gRPC response before the transcoder does, so it sees the
-- gRPC status first: in the headers of a trailers-only response, or in the
-- trailers of a normal one. For transcoded REST calls (marked by
-- openai_rest.lua with dynamic metadata "tokenwire.rest") it records, as
-- plain strings in that namespace:
--   grpc_status   the numeric gRPC status code
--   grpc_message  grpc-message (percent-encoded, as on the wire)
--   reason        tokenwire-reason (the cause, e.g. PROMPT_TOO_LONG)
--   param         tokenwire-param (the request field at fault)
--   retry_ms      retry-after-ms (when a retry may succeed)
-- The server sends the last three as plain trailers beside its rich
-- google.rpc.Status, so nothing here decodes protobuf. openai_rest.lua
-- renders them; for a stream it reads them when the transcoder closes the
-- JSON array, after this filter has run on the trailers.
-- Native gRPC calls pass through untouched.

local wire = require("wire") -- generated from tokenwire/wire.py
local names = require("gateway_names") -- generated: names shared with the config builder

local NS = names.REST_METADATA
local FIELDS = {
  grpc_message = "grpc-message", reason = wire.REASON_TRAILER, param = wire.PARAM_TRAILER,
  retry_ms = wire.RETRY_TRAILER,
}

-- Record the status found in `src` (headers or trailers); false if none.
-- The metadata handle is taken afresh: handles do not survive a yield.
local function record(handle, src)
  local status = src:get("grpc-status")
  if status == nil then
    return false
  end
  local meta = handle:streamInfo():dynamicMetadata()
  meta:set(NS, "grpc_status", status)
  if status ~= "0" then
    for key, header in pairs(FIELDS) do
      meta:set(NS, key, src:get(header) or "")
    end
  end
  return true
end

function envoy_on_response(handle)
  if handle:streamInfo():dynamicMetadata():get(NS) == nil then
    return -- native gRPC pass-through
  end
  if record(handle, handle:headers()) then
    return -- trailers-only response
  end
  -- Wait for the trailers without touching the body: the body chunks
  -- stream through unbuffered (no Lua resume per message).
  local trailers = handle:trailers()
  if trailers ~= nil then
    record(handle, trailers)
  end
end
