"""memtap's load and fault harness: real servers, real MCP clients, the trace checked against both.

``make test`` runs it in a short form (``tests/test_harness_short.py``), ``make soak`` in a long
one (``benchmarks/soak.py``), which prints the table of docs/reliability.md.
"""
