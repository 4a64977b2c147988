-- tokenwire.gateway.stream_routes: the REST paths with an :events / :json twin (generated: do not edit)
return {
  STREAMABLE = { ["/inference/v1/generate"] = "/inference/v1/generate", ["/v1/chat/completions"] = "/v1/chat/completions", ["/v1/chat/completions/tokens"] = "/v1/chat/completions", ["/v1/completions"] = "/v1/completions", ["/v1/messages"] = "/v1/messages", ["/v1/responses"] = "/v1/responses" },
  ALWAYS_JSON = { ["/inference/v1/generate"] = "/inference/v1/generate", ["/v1/chat/completions"] = "/v1/chat/completions", ["/v1/chat/completions/tokens"] = "/v1/chat/completions", ["/v1/completions"] = "/v1/completions", ["/v1/messages"] = "/v1/messages", ["/v1/responses"] = "/v1/responses" },
}
