-- Server-Sent Events from the transcoder's streamed JSON array.
--
-- The transcoder prints a server stream as one JSON array ("[{..}",
-- ",{..}", ..., "]" written when the gRPC trailers arrive). Each element
-- becomes "data: {..}\n\n"; the closing "]" (or anything that is not an
-- array) calls `finish()`, whose text ends the stream ("data: [DONE]\n\n",
-- after an error event when the call failed).
local M = {}

-- Scanner state over the array: depth 0 before "[", 1 between elements,
-- >= 2 inside an element. An element split across chunks is carried over.
function M.new()
  return { depth = 0, in_string = false, escape = false, pending = {}, done = false }
end

-- OpenAI always prints "choices" (empty on the usage chunk); the transcoder
-- omits empty repeated fields. A key is the only place the bytes
-- `"choices":` can occur (inside a JSON string the quote would be escaped).
function M.with_choices(element)
  if element:find('"choices":', 1, true) then
    return element
  end
  if element == "{}" then
    return '{"choices":[]}'
  end
  return '{"choices":[],' .. element:sub(2)
end

-- The SSE text for chunk `s` of the array.
function M.reframe(st, s, finish)
  local out = {}
  local i, n = 1, #s
  local start = (st.depth >= 2) and 1 or nil
  if st.escape then
    st.escape = false
    i = 2
  end
  while i <= n and not st.done do
    if st.depth < 2 then
      local j = s:find("[^%s,]", i)
      if j == nil then
        break
      end
      local c = s:sub(j, j)
      if c == "[" and st.depth == 0 then
        st.depth = 1
      elseif c == "{" and st.depth == 1 then
        st.depth = 2
        start = j
      else -- "]" closes the array; anything else is an error body, not an array
        st.done = true
        out[#out + 1] = finish()
      end
      i = j + 1
    elseif st.in_string then
      local j = s:find('["\\]', i)
      if j == nil then
        break
      end
      if s:sub(j, j) == "\\" then
        if j == n then
          st.escape = true
        end
        i = j + 2
      else
        st.in_string = false
        i = j + 1
      end
    else
      local j = s:find('[{}%[%]"]', i)
      if j == nil then
        break
      end
      local c = s:sub(j, j)
      if c == '"' then
        st.in_string = true
      elseif c == "{" or c == "[" then
        st.depth = st.depth + 1
      else
        st.depth = st.depth - 1
        if st.depth == 1 then
          st.pending[#st.pending + 1] = s:sub(start, j)
          out[#out + 1] = "data: " .. M.with_choices(table.concat(st.pending)) .. "\n\n"
          st.pending = {}
          start = nil
        end
      end
      i = j + 1
    end
  end
  if start ~= nil and st.depth >= 2 then
    st.pending[#st.pending + 1] = s:sub(start)
  end
  return table.concat(out)
end

return M
