-- List bodies: vLLM answers `POST /v1/completions/render` with a JSON list
-- at the top level. Envoy's transcoder prints a message (it cannot print a
-- repeated field as the whole body: `response_body` is unsupported for
-- non-HttpBody fields), so the one field that holds the list is unwrapped:
-- {"requests": [...]} becomes [...] ({} , an empty list, becomes []).
local M = {}

-- The REST paths whose response is the list in this field.
M.PATHS = { ["/v1/completions/render"] = "requests" }

-- The field holding the list for a request to `path` (query ignored), or nil.
function M.field(path)
  return M.PATHS[path:match("^([^?]*)")]
end

-- The list text inside response object text `s` whose only key is `key`;
-- nil when `s` is not such an object (left as it is).
function M.unwrap(s, key)
  if s:match("^%s*{%s*}%s*$") then
    return "[]"
  end
  local value = s:match('^%s*{%s*"' .. key .. '"%s*:%s*(%[.*%])%s*}%s*$')
  return value
end

return M
