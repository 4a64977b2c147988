-- The affinity key of a REST body without an X-Session-ID header: what a
-- fleet gateway hashes on so that a conversation's turns land on the
-- replica holding its prefix cache. The first non-empty of the top-level
-- "session_id", "nvext"."cache_salt", "cache_salt", "user" (the raw JSON
-- string text; at most MAX_LEN bytes, else none). Routing keys are what a
-- proxy must compute itself; the consistent hash is Envoy's (config.py),
-- over the caller's credential and this key, so two tenants' identical keys
-- are different routing keys. The gateway drops a caller's own HEADER on
-- arrival: only this module sets it.
local json_scan = require("json_scan")
local wire = require("wire") -- generated from tokenwire/wire.py

local M = {}

M.MAX_LEN = 256
M.HEADER = wire.AFFINITY_HEADER

local ORDER = { "session_id", "nvext.cache_salt", "cache_salt", "user" }

local function usable(v)
  if v ~= nil and #v > 0 and #v <= M.MAX_LEN then
    return v
  end
  return nil
end

-- The affinity key of JSON object text `s`, or nil.
function M.key(s)
  local found = {}
  json_scan.each_key(s, function(key, after)
    if key == "nvext" then
      local start = json_scan.value_index(s, after)
      if start ~= nil and s:sub(start, start) == "{" then
        json_scan.each_key(s:sub(start), function(inner, inner_after)
          if inner == "cache_salt" then
            found["nvext.cache_salt"] = json_scan.string_value(s:sub(start), inner_after)
            return true
          end
        end)
      end
    elseif key == "session_id" or key == "cache_salt" or key == "user" then
      found[key] = json_scan.string_value(s, after)
    end
  end)
  for _, name in ipairs(ORDER) do
    local v = usable(found[name])
    if v ~= nil then
      return v
    end
  end
  return nil
end

return M
