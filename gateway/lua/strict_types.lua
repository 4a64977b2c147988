-- Strict top-level JSON types for REST bodies. The gRPC-JSON transcoder
-- coerces what OpenAI rejects (an object where a list is expected becomes a
-- one-element list; "yes" becomes a bool), so before it runs, the kind of
-- each top-level value is checked against rules generated from the proto
-- descriptor (tokenwire.gateway.lua_bundle): "array" (repeated fields),
-- "object" (message fields), "bool". null always passes (an absent field).
-- Only the top level is scanned, structurally, like stream_select.
local json_scan = require("json_scan")

local M = {}

local OPENERS = { array = "[", object = "{" }

local function fits(kind, first)
  if first == "n" then
    return true -- null
  end
  if kind == "bool" then
    return first == "t" or first == "f"
  end
  return first == OPENERS[kind]
end

-- The first top-level key of JSON object text `s` whose value does not have
-- the kind `rules[key]` asks, and that kind; nil when all fit (or `s` is not
-- an object: the transcoder answers that itself).
function M.violation(s, rules)
  local found = json_scan.each_key(s, function(key, after)
    local kind = rules[key]
    if kind ~= nil then
      local first = json_scan.value_start(s, after)
      if first ~= nil and not fits(kind, first) then
        return { key, kind }
      end
    end
  end)
  if found == nil then
    return nil
  end
  return found[1], found[2]
end

local NAMES = { array = "an array", object = "an object", bool = "a boolean" }

-- The text of the 400 for a value of the wrong kind, worded like the
-- transcoder's own type errors ("<field>: invalid value ..."), so Envoy's
-- local-reply mapper and openai_rest.lua render it as OpenAI does
-- (param = the field, code "invalid_type").
function M.message(key, kind)
  return key .. ": invalid value, expected " .. NAMES[kind]
end

return M
