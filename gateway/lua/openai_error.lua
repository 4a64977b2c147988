-- A failed gRPC call as OpenAI's error body
-- {"error": {"message", "type", "param", "code"}} and its HTTP status.
-- Everything comes from plain headers/trailers recorded by grpc_status.lua:
-- grpc-status, grpc-message (percent-encoded), and the server's
-- tokenwire-reason / tokenwire-param / retry-after-ms. No protobuf here.
local json = require("json_text")

local M = {}

-- gRPC code -> HTTP status (Envoy's and grpc-gateway's mapping).
local HTTP_STATUS = {
  [0] = 200, [1] = 499, [2] = 500, [3] = 400, [4] = 504, [5] = 404, [6] = 409, [7] = 403,
  [8] = 429, [9] = 400, [10] = 409, [11] = 400, [12] = 501, [13] = 500, [14] = 503,
  [15] = 500, [16] = 401,
}
local CODE_NAMES = {
  [1] = "cancelled", [2] = "unknown", [3] = "invalid_argument", [4] = "deadline_exceeded",
  [5] = "not_found", [6] = "already_exists", [7] = "permission_denied",
  [8] = "resource_exhausted", [9] = "failed_precondition", [10] = "aborted",
  [11] = "out_of_range", [12] = "unimplemented", [13] = "internal", [14] = "unavailable",
  [15] = "data_loss", [16] = "unauthenticated",
}

function M.error_type(http)
  if http == 400 or http == 404 or http == 409 or http == 413 then
    return "invalid_request_error"
  elseif http == 401 then
    return "authentication_error"
  elseif http == 403 then
    return "permission_error"
  elseif http == 429 then
    return "rate_limit_error"
  end
  return "server_error"
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
  local http = HTTP_STATUS[code] or 500
  local reason, param = rec.reason, rec.param
  if reason == "" then
    reason = nil
  end
  local code_text = reason and reason:lower() or CODE_NAMES[code] or "unknown"
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
  text = text:gsub('"code":"invalid_request_body"', '"code":"invalid_type"', 1)
  return text
end

return M
