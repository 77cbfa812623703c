"""The memtap command line: one module per command group."""
