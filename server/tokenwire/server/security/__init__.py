"""Who may call what: API keys, tenants and their caps, trusted proxies (auth, tenancy)."""
