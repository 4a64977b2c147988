-- Stream selection: a REST body with "stream": true at its top level goes
-- to the streaming method's binding (".../completions:stream"), which the
-- transcoder then matches. A "stream" key inside a nested object does not
-- count.
local M = {}

-- The REST paths with a streaming twin.
M.STREAMABLE = { ["/v1/chat/completions"] = true, ["/inference/v1/generate"] = true }

-- Whether JSON object text `s` has `"stream": true` at its top level. Scans
-- structural characters only, and stops at the key.
function M.stream_requested(s)
  local root = s:find("[^%s]")
  if root == nil or s:sub(root, root) ~= "{" then
    return false
  end
  local depth, key_next, i = 1, true, root + 1
  while true do
    local j = s:find('[{}%[%]",]', i)
    if j == nil then
      return false
    end
    local c = s:sub(j, j)
    if c == '"' then
      local k = j + 1
      while true do -- the closing quote
        local q = s:find('["\\]', k)
        if q == nil then
          return false
        end
        if s:sub(q, q) == "\\" then
          k = q + 2
        else
          k = q
          break
        end
      end
      if key_next and depth == 1 and s:sub(j + 1, k - 1) == "stream" then
        return s:match("^%s*:%s*(%a+)", k + 1) == "true"
      end
      key_next = false
      i = k + 1
    else
      if c == "{" or c == "[" then
        depth = depth + 1
      elseif c == "}" or c == "]" then
        depth = depth - 1
      else -- ","
        key_next = depth == 1
      end
      i = j + 1
    end
  end
end

-- The path a request should take: `path` with ":stream" after its base when
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
  return base .. ":stream" .. query
end

return M
