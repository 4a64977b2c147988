"""The OpenAI Responses kind (POST /v1/responses): a chat in the Responses API's shapes."""
