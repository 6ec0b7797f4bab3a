"""People's connections to OAuth servers (per-user grants for MCP servers): the store the
worker and the API share (`store`), and the client side of the OAuth flows (`oauth`)."""
