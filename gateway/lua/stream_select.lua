-- Stream selection: a REST body with "stream": true at its top level goes
-- to the binding of the method that streams it as Server-Sent Events
-- (".../completions:events", tokenwire.v1.EventStreamService), which the
-- transcoder then matches. A "stream" key inside a nested object does not
-- count.
--
-- A unary chat, completion or Messages call goes to the ":json" binding
-- instead (EventStreamService.CreateChatCompletionJson, ...): the server
-- prints that JSON with every key the schema requires, null or empty
-- included, which the transcoder would omit.
local json_scan = require("json_scan")
-- generated from gateway/stream_routes.py (tools/gen_routes.py: the server's
-- registry of fronts and the proto's bindings)
local stream_routes = require("stream_routes")

local M = {}

-- The REST paths with a streaming twin, and the base of that twin's binding
-- (prime-rl's /v1/chat/completions/tokens is a chat): every POST path of a
-- front with an SSE twin (EventStreamService's ...Events, "<base>:events").
M.STREAMABLE = stream_routes.STREAMABLE

-- The paths whose unary JSON the server always prints (a front's ...Json
-- twin, "<base>:json"): the keys OpenAI's and Anthropic's schemas require
-- that the transcoder would omit (`null`s: a chat, completion or generate
-- choice's `logprobs`, Anthropic's `stop_sequence`; empty text; a chat
-- logprob entry's `top_logprobs: []`; the Response's nulls and empty lists).
M.ALWAYS_JSON = stream_routes.ALWAYS_JSON

-- SageMaker's `POST /invocations`: vLLM runs the body as the first request
-- type it validates as, a chat (`messages`) before a completion (`prompt`);
-- here the body's top-level keys pick the route the same way.
M.INVOCATIONS = "/invocations"
M.INVOCATION_ROUTES = { { "messages", "/v1/chat/completions" }, { "prompt", "/v1/completions" } }
M.INVOCATION_ERROR = "Cannot find suitable handler for request. Expected one of: "
  .. "[ChatCompletionRequest (messages), CompletionRequest (prompt)]"

-- The path an `/invocations` body goes to (its query kept), or nil when the
-- body has neither key at its top level.
function M.invocation_path(path, s)
  local base, query = path:match("^([^?]*)(.*)$")
  if base ~= M.INVOCATIONS then
    return nil
  end
  local keys = {}
  json_scan.each_key(s, function(key)
    keys[key] = true
  end)
  for _, route in ipairs(M.INVOCATION_ROUTES) do
    if keys[route[1]] then
      return route[2] .. query
    end
  end
  return nil
end

-- Whether JSON object text `s` has `"<name>": true` at its top level.
function M.flag_set(s, name)
  return json_scan.each_key(s, function(key, after)
    if key == name then
      return s:match("^%s*:%s*(%a+)", after) == "true"
    end
  end) == true
end

-- Whether JSON object text `s` has `"stream": true` at its top level.
function M.stream_requested(s)
  return M.flag_set(s, "stream")
end

-- The path a request should take and its mode: ("<base>:events", "sse") when
-- it is a POST to a streamable route whose body asks to stream;
-- ("<base>:json", "json") for a unary chat, completion or Messages call;
-- else nil.
-- `body()` gives the body text (read only when it matters).
function M.stream_path(method, path, body)
  local base, query = path:match("^([^?]*)(.*)$")
  if method ~= "POST" or not M.STREAMABLE[base] then
    return nil
  end
  local text = body()
  if text == nil then
    return nil
  end
  if M.stream_requested(text) then
    return M.STREAMABLE[base] .. ":events" .. query, "sse"
  end
  if M.ALWAYS_JSON[base] then
    return M.ALWAYS_JSON[base] .. ":json" .. query, "json"
  end
  return nil
end

return M
