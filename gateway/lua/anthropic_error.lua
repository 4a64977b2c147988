-- Errors of the Anthropic Messages routes (/v1/messages*) in Anthropic's
-- shape: {"type": "error", "error": {"type", "message"}}, with the HTTP
-- status and retry headers openai_error.lua gives the same failed call.
-- The error types are tokenwire.wire's ANTHROPIC_ERROR_TYPES (the server
-- writes a failed stream's error event with the same map).
local json = require("json_text")
local wire = require("wire") -- generated from tokenwire/wire.py
local openai_error = require("openai_error")

local M = {}

-- Whether a request path is one of the Messages API's.
function M.applies(path)
  local prefix = wire.ANTHROPIC_PATH_PREFIX
  return path:sub(1, #prefix) == prefix
end

function M.error_type(http)
  return wire.ANTHROPIC_ERROR_TYPES[http] or wire.ANTHROPIC_DEFAULT_ERROR_TYPE
end

-- The body for `message` at HTTP status `http`.
function M.body(http, message)
  return '{"type":"error","error":{"type":' .. json.string(M.error_type(http))
    .. ',"message":' .. json.string(message) .. "}}"
end

-- As openai_error.render: http status, Anthropic's body, retry ms or nil.
-- The field at fault (the server's tokenwire-param) leads the message when
-- the message does not name it already.
function M.render(rec)
  local http, _, retry_ms = openai_error.render(rec)
  local message = openai_error.percent_decode(rec.grpc_message or "")
  if message == "" then
    message = "the call failed with gRPC status " .. tostring(rec.grpc_status)
  end
  local param = rec.param
  if param ~= nil and param ~= "" and not message:find(param, 1, true) then
    message = param .. ": " .. message
  end
  return http, M.body(http, message), retry_ms
end

return M
