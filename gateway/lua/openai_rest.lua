-- Client-side filter (before the gRPC-JSON transcoder): the OpenAI REST
-- conventions the transcoder lacks.
--
-- Request: `POST /v1/chat/completions` and `POST /inference/v1/generate`
-- with "stream": true at the top level of the JSON body (whatever the
-- content type says) go to the streaming method's binding (`...:stream`);
-- the transcoder then matches the new path. Every REST call is
-- marked in dynamic metadata "tokenwire.rest" (mode "json" or "sse");
-- native gRPC calls are left alone.
--
-- Response:
-- * grpc-* headers are dropped from REST responses;
-- * a failed call (gRPC status recorded by grpc_status.lua) becomes
--   {"error": {"message", "type", "param", "code"}} with the HTTP status of
--   the gRPC code; message and param come from the google.rpc.Status and
--   its google.rpc.ErrorInfo detail (metadata "param"); a RetryInfo detail
--   becomes the retry-after / retry-after-ms headers;
-- * a stream, which the transcoder prints as one JSON array
--   ("[{..}", ",{..}", ..., "]" written when the gRPC trailers arrive),
--   is re-framed chunk by chunk as Server-Sent Events
--   "data: {..}\n\n"; the closing "]" becomes "data: [DONE]\n\n", preceded
--   by "data: {"error": {..}}\n\n" when the stream ended with an error.

local NS = "tokenwire.rest"
local STREAMABLE = { ["/v1/chat/completions"] = true, ["/inference/v1/generate"] = true }
local GRPC_HEADERS = {
  "grpc-status", "grpc-message", "grpc-status-details-bin", "grpc-accept-encoding",
  "grpc-encoding",
}

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

local function error_type(http)
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

-- JSON -----------------------------------------------------------------

local ESCAPES = {
  ['"'] = '\\"', ["\\"] = "\\\\", ["\b"] = "\\b", ["\f"] = "\\f", ["\n"] = "\\n",
  ["\r"] = "\\r", ["\t"] = "\\t",
}

local function json_string(s)
  local escaped = s:gsub('[%c"\\]', function(c)
    return ESCAPES[c] or string.format("\\u%04x", c:byte())
  end)
  return '"' .. escaped .. '"'
end

-- google.rpc.Status from grpc-status-details-bin -------------------------

local B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"

local function b64decode(s)
  s = s:gsub("[^%w%+/]", "")
  local out, acc, nbits = {}, 0, 0
  for i = 1, #s do
    acc = acc * 64 + (B64:find(s:sub(i, i), 1, true) - 1)
    nbits = nbits + 6
    if nbits >= 8 then
      nbits = nbits - 8
      local byte = math.floor(acc / 2 ^ nbits)
      out[#out + 1] = string.char(byte)
      acc = acc - byte * 2 ^ nbits
    end
  end
  return table.concat(out)
end

local function varint(s, i)
  local value, scale = 0, 1
  while i <= #s do
    local b = s:byte(i)
    i = i + 1
    value = value + (b % 128) * scale
    if b < 128 then
      return value, i
    end
    scale = scale * 128
  end
  return nil, i
end

-- The fields of a serialized protobuf message: { {number, value}, ... }
-- (varints as numbers, length-delimited fields as strings).
local function fields(s)
  local out, i = {}, 1
  while i <= #s do
    local key
    key, i = varint(s, i)
    if key == nil then
      break
    end
    local number, wire = math.floor(key / 8), key % 8
    if wire == 0 then
      local v
      v, i = varint(s, i)
      out[#out + 1] = { number, v }
    elseif wire == 2 then
      local len
      len, i = varint(s, i)
      if len == nil then
        break
      end
      out[#out + 1] = { number, s:sub(i, i + len - 1) }
      i = i + len
    elseif wire == 1 then
      i = i + 8
    elseif wire == 5 then
      i = i + 4
    else
      break
    end
  end
  return out
end

local ERROR_INFO = "type.googleapis.com/google.rpc.ErrorInfo"
local RETRY_INFO = "type.googleapis.com/google.rpc.RetryInfo"

-- The ErrorInfo reason and metadata "param".
local function parse_error_info(bin)
  local reason, param
  for _, e in ipairs(fields(bin)) do
    if e[1] == 1 then
      reason = e[2]
    elseif e[1] == 3 then -- metadata map entry
      local k, v
      for _, kv in ipairs(fields(e[2])) do
        if kv[1] == 1 then
          k = kv[2]
        elseif kv[1] == 2 then
          v = kv[2]
        end
      end
      if k == "param" then
        param = v
      end
    end
  end
  return reason, param
end

-- RetryInfo.retry_delay in milliseconds.
local function parse_retry_info(bin)
  for _, r in ipairs(fields(bin)) do
    if r[1] == 1 then -- google.protobuf.Duration
      local seconds, nanos = 0, 0
      for _, d in ipairs(fields(r[2])) do
        if d[1] == 1 then
          seconds = d[2]
        elseif d[1] == 2 then
          nanos = d[2]
        end
      end
      return seconds * 1000 + math.floor(nanos / 1000000)
    end
  end
  return nil
end

-- A serialized google.rpc.Status: {message, reason, param, retry_ms}.
local function parse_status(bin)
  local out = {}
  for _, f in ipairs(fields(bin)) do
    if f[1] == 2 then
      out.message = f[2]
    elseif f[1] == 3 then -- details: google.protobuf.Any
      local type_url, value
      for _, a in ipairs(fields(f[2])) do
        if a[1] == 1 then
          type_url = a[2]
        elseif a[1] == 2 then
          value = a[2]
        end
      end
      if type_url == ERROR_INFO and value ~= nil then
        out.reason, out.param = parse_error_info(value)
      elseif type_url == RETRY_INFO and value ~= nil then
        out.retry_ms = parse_retry_info(value)
      end
    end
  end
  return out
end

local function percent_decode(s)
  return (s:gsub("%%(%x%x)", function(h)
    return string.char(tonumber(h, 16))
  end))
end

-- The OpenAI error for the gRPC status recorded in `rest`:
-- http status, body, retry delay in ms (or nil).
local function openai_error(rest)
  local code = tonumber(rest["grpc_status"] or "") or 2
  local message = percent_decode(rest["grpc_message"] or "")
  local status = {}
  local details = rest["grpc_details"] or ""
  if details ~= "" then
    local ok, parsed = pcall(parse_status, b64decode(details))
    if ok then
      status = parsed
    end
  end
  if status.message ~= nil and status.message ~= "" then
    message = status.message
  end
  if message == "" then
    message = "the call failed with gRPC status " .. (CODE_NAMES[code] or tostring(code))
  end
  local http = HTTP_STATUS[code] or 500
  local reason, param = status.reason, status.param
  local code_text = reason and reason:lower() or CODE_NAMES[code] or "unknown"
  local body = '{"error":{"message":' .. json_string(message)
    .. ',"type":' .. json_string(error_type(http))
    .. ',"param":' .. (param and param ~= "" and json_string(param) or "null")
    .. ',"code":' .. json_string(code_text) .. "}}"
  return http, body, status.retry_ms
end

-- SSE re-framing of the transcoder's JSON array --------------------------

-- Scanner state over the array: depth 0 before "[", 1 between elements,
-- >= 2 inside an element. An element split across chunks is carried over.
local function new_scanner()
  return { depth = 0, in_string = false, escape = false, pending = {}, done = false }
end

-- OpenAI always prints "choices" (empty on the usage chunk); the transcoder
-- omits empty repeated fields. A key is the only place the bytes
-- `"choices":` can occur (inside a JSON string the quote would be escaped).
local function with_choices(element)
  if element:find('"choices":', 1, true) then
    return element
  end
  if element == "{}" then
    return '{"choices":[]}'
  end
  return '{"choices":[],' .. element:sub(2)
end

-- The SSE text for chunk `s`; `finish()` gives the text that ends the
-- stream (called once, at the closing "]" or at anything not an array).
local function reframe(st, s, finish)
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
          out[#out + 1] = "data: " .. with_choices(table.concat(st.pending)) .. "\n\n"
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

-- Filter entry points ------------------------------------------------------

-- Whether a JSON object body has `"stream": true` at its top level (a
-- "stream" key inside a nested object does not count). Scans structural
-- characters only, and stops at the key.
local function stream_requested(s)
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

function envoy_on_request(handle)
  local headers = handle:headers()
  local ctype = headers:get("content-type") or ""
  if ctype:sub(1, 16) == "application/grpc" then
    return -- native gRPC pass-through
  end
  local mode = "json"
  local path = headers:get(":path") or ""
  local base, query = path:match("^([^?]*)(.*)$")
  if headers:get(":method") == "POST" and STREAMABLE[base] then
    local body = handle:body()
    if body ~= nil and stream_requested(body:getBytes(0, body:length())) then
      mode = "sse"
      handle:headers():replace(":path", base .. ":stream" .. query)
    end
  end
  handle:streamInfo():dynamicMetadata():set(NS, "mode", mode)
end


-- Envoy's own 400 (already OpenAI-shaped by local_reply_config): when the
-- transcoder rejected a value ("max_tokens: invalid value ..."), name the
-- field in "param" as OpenAI does.
local function name_rejected_field(handle)
  local body = handle:body()
  if body == nil then
    return
  end
  local text = body:getBytes(0, body:length())
  local param = text:match('"message":"([%a_][%w_%.%[%]]*): invalid value ')
  if param == nil then
    return
  end
  text = text:gsub('"param":null', function()
    return '"param":' .. json_string(param)
  end, 1)
  text = text:gsub('"code":"invalid_request_body"', '"code":"invalid_type"', 1)
  body:setBytes(text)
  handle:headers():replace("content-length", tostring(#text))
end

function envoy_on_response(handle)
  local rest = handle:streamInfo():dynamicMetadata():get(NS)
  if rest == nil then
    return -- native gRPC pass-through
  end
  local headers = handle:headers()
  for _, name in ipairs(GRPC_HEADERS) do
    headers:remove(name)
  end
  local status = rest["grpc_status"]
  if status ~= nil and status ~= "0" then
    -- The call failed before any response message: an HTTP error.
    local http, body, retry_ms = openai_error(rest)
    handle:body(true):setBytes(body)
    headers = handle:headers()
    headers:replace(":status", tostring(http))
    headers:replace("content-type", "application/json")
    headers:replace("content-length", tostring(#body))
    if retry_ms ~= nil then -- google.rpc.RetryInfo: what HTTP clients (the openai SDK) read
      headers:replace("retry-after-ms", tostring(retry_ms))
      headers:replace("retry-after", tostring(math.ceil(retry_ms / 1000)))
    end
    return
  end
  if status == nil and headers:get(":status") == "400" then
    name_rejected_field(handle)
    return
  end
  if rest["mode"] ~= "sse" or headers:get(":status") ~= "200" then
    return -- a unary response, or one of Envoy's own (already OpenAI-shaped) errors
  end
  headers:replace("content-type", "text/event-stream")
  headers:replace("cache-control", "no-cache")
  headers:remove("content-length")
  local function finish()
    local now = handle:streamInfo():dynamicMetadata():get(NS) or {}
    local code = now["grpc_status"]
    if code == "0" then
      return "data: [DONE]\n\n"
    end
    if code == nil then
      now = { grpc_status = "14", grpc_message = "the stream ended without a gRPC status" }
    end
    local _, body = openai_error(now)
    return "data: " .. body .. "\n\ndata: [DONE]\n\n"
  end
  local scanner = new_scanner()
  for chunk in handle:bodyChunks() do
    local len = chunk:length()
    if len > 0 then
      chunk:setBytes(reframe(scanner, chunk:getBytes(0, len), finish))
    end
  end
end
