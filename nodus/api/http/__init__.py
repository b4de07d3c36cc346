"""HTTP endpoints: thin handlers that parse a request, call the generic store, and render."""
