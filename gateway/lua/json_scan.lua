-- The top-level keys of a JSON object text, found structurally (strings are
-- skipped, nesting is counted), without parsing values: what stream
-- selection and the strict type check read before the transcoder runs.
local M = {}

-- The index of the quote closing the string that opens at `open`, or nil
-- when the text is cut short.
local function closing_quote(s, open)
  local k = open + 1
  while true do
    local q = s:find('["\\]', k)
    if q == nil then
      return nil
    end
    if s:sub(q, q) ~= "\\" then
      return q
    end
    k = q + 2
  end
end

-- Call visit(key, after) for each top-level key of object text `s`, where
-- `after` is the index just past the key's closing quote; stop early when
-- visit returns a value, and return it. nil when `s` is not an object or is
-- cut short.
function M.each_key(s, visit)
  local root = s:find("[^%s]")
  if root == nil or s:sub(root, root) ~= "{" then
    return nil
  end
  local depth, key_next, i = 1, true, root + 1
  while true do
    local j = s:find('[{}%[%]",]', i)
    if j == nil then
      return nil
    end
    local c = s:sub(j, j)
    if c == '"' then
      local k = closing_quote(s, j)
      if k == nil then
        return nil
      end
      if key_next and depth == 1 then
        local found = visit(s:sub(j + 1, k - 1), k + 1)
        if found ~= nil then
          return found
        end
      end
      key_next = false
      i = k + 1
    else
      if c == "{" or c == "[" then
        depth = depth + 1
      elseif c == "}" or c == "]" then
        depth = depth - 1
        if depth == 0 then
          return nil -- the object ended (what follows is not ours)
        end
      else -- ","
        key_next = depth == 1
      end
      i = j + 1
    end
  end
end

-- The first character of the value after the key ending before `after`.
function M.value_start(s, after)
  return s:match("^%s*:%s*(.)", after)
end

-- The text of a string value after the key ending before `after` (escapes
-- left as they are), or nil when the value is not a string.
function M.string_value(s, after)
  local start = s:match('^%s*:%s*()"', after)
  local close = start and closing_quote(s, start)
  return close and s:sub(start + 1, close - 1)
end

-- The index where the value after the key ending before `after` starts.
function M.value_index(s, after)
  return s:match("^%s*:%s*()", after)
end

return M
