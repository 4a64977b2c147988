-- Stream selection: a REST body with "stream": true at its top level goes
-- to the binding of the method that streams it as Server-Sent Events
-- (".../completions:events", tokenwire.v1.EventStreamService), which the
-- transcoder then matches. A "stream" key inside a nested object does not
-- count.
local json_scan = require("json_scan")

local M = {}

-- The REST paths with a streaming twin.
M.STREAMABLE = {
  ["/v1/chat/completions"] = true,
  ["/v1/completions"] = true,
  ["/inference/v1/generate"] = true,
}

-- Whether JSON object text `s` has `"stream": true` at its top level.
function M.stream_requested(s)
  return json_scan.each_key(s, function(key, after)
    if key == "stream" then
      return s:match("^%s*:%s*(%a+)", after) == "true"
    end
  end) == true
end

-- The path a request should take: `path` with ":events" after its base when
-- it is a POST to a streamable route whose body asks to stream; else nil.
-- `body()` gives the body text (read only when it matters).
function M.stream_path(method, path, body)
  local base, query = path:match("^([^?]*)(.*)$")
  if method ~= "POST" or not M.STREAMABLE[base] then
    return nil
  end
  local text = body()
  if text == nil or not M.stream_requested(text) then
    return nil
  end
  return base .. ":events" .. query
end

return M
