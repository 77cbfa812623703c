"""Scoring replayed runs at three levels (storage, retrieval, answer), profiles and statistics."""
