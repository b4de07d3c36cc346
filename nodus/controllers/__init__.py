"""``nodus controllers``: reconcilers for every kind, one active leader, all through the API."""
