"""A plug-in embedder, loaded by memtap through `provider: embedder_plugin:make`."""

from __future__ import annotations


class LengthEmbedder:
    """Two numbers per text: its length and a configured constant."""

    def __init__(self, constant: float) -> None:
        self.dimensions = 2
        self.constant = constant

    def embed(self, texts: list[str]) -> list[list[float]]:
        return [[float(len(text)), self.constant] for text in texts]


def make(constant: float = 1.0) -> LengthEmbedder:
    return LengthEmbedder(constant)
