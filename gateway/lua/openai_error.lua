-- A failed gRPC call as OpenAI's error body
-- {"error": {"message", "type", "param", "code"}} and its HTTP status.
-- Everything comes from plain headers/trailers recorded by grpc_status.lua:
-- grpc-status, grpc-message (percent-encoded), and the server's
-- tokenwire-reason / tokenwire-param / retry-after-ms. No protobuf here.
-- The status maps are tokenwire.wire's (the generated module "wire"), the
-- same the server renders a failed stream's error event with.
local json = require("json_text")
local wire = require("wire") -- generated from tokenwire/wire.py
local names = require("gateway_names") -- generated: names shared with the config builder

local M = {}

local HTTP_STATUS = wire.HTTP_STATUS -- gRPC code -> HTTP status
local CODE_NAMES = wire.GRPC_CODE_NAMES -- gRPC code -> OpenAI's error code (lower case)

function M.error_type(http)
  return wire.ERROR_TYPES[http] or wire.DEFAULT_ERROR_TYPE
end

function M.percent_decode(s)
  return (s:gsub("%%(%x%x)", function(h)
    return string.char(tonumber(h, 16))
  end))
end

-- The error for a recorded status `rec` (grpc_status, grpc_message, reason,
-- param, retry_ms; all strings or nil): http status, body, retry ms or nil.
function M.render(rec)
  local code = tonumber(rec.grpc_status or "") or 2
  local message = M.percent_decode(rec.grpc_message or "")
  if message == "" then
    message = "the call failed with gRPC status " .. (CODE_NAMES[code] or tostring(code))
  end
  local http = HTTP_STATUS[code] or wire.UNKNOWN_HTTP_STATUS
  local reason, param = rec.reason, rec.param
  if reason == "" then
    reason = nil
  end
  local code_text = reason and reason:lower() or CODE_NAMES[code] or CODE_NAMES[2] -- UNKNOWN
  local body = '{"error":{"message":' .. json.string(message)
    .. ',"type":' .. json.string(M.error_type(http))
    .. ',"param":' .. (param and param ~= "" and json.string(param) or "null")
    .. ',"code":' .. json.string(code_text) .. "}}"
  return http, body, tonumber(rec.retry_ms or "")
end

-- Envoy's own 400 (already OpenAI-shaped by local_reply_config) when the
-- transcoder rejected a value ("max_tokens: invalid value ..."): the body
-- with the field named in "param" as OpenAI does, or nil to leave it.
function M.name_rejected_field(text)
  local param = text:match('"message":"([%a_][%w_%.%[%]]*): invalid value ')
  if param == nil then
    return nil
  end
  text = text:gsub('"param":null', function()
    return '"param":' .. json.string(param)
  end, 1)
  text = text:gsub('"code":' .. json.string(names.INVALID_BODY_CODE),
    '"code":' .. json.string(names.INVALID_TYPE_CODE), 1)
  return text
end

return M
