"""Trace model and store: events, effects, items, lineage, recorder, telemetry."""
