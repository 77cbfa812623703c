"""Memory backends behind the proxy: one protocol, one module per backend."""
