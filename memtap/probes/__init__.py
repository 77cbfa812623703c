"""Suites: the schema, importers of published benchmarks, generators, and replay."""
