-- tokenwire.gateway.lua_bundle: names shared with the config builder (generated: do not edit)
return {
  REST_METADATA = "tokenwire.rest",
  STRICT_PARAM = "strict_param",
  INVALID_BODY_CODE = "invalid_request_body",
  INVALID_TYPE_CODE = "invalid_type",
}
