"""API definitions shared by the server (``nodus.api``) and its clients (controllers, the agent, the CLI)."""
