"""The nodus.dev/v1 vocabulary shared by the API server and its clients."""
