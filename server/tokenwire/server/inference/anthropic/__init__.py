"""The Anthropic Messages kind (POST /v1/messages): a chat in Anthropic's shapes."""
