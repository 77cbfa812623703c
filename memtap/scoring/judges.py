"""Stronger matchers and the permission judge, through a configured OpenAI-compatible upstream.

``--matcher embedding:MODEL`` and ``--matcher llm:MODEL``, ``--permission-judge llm:MODEL`` name
a model of the configuration file's ``model_list`` (LiteLLM's format). Its ``litellm_params``
give the endpoint: ``api_base`` (an OpenAI-compatible server: a local embedding model, vLLM,
Ollama, or memtap's own chat proxy), ``model`` (a ``provider/`` prefix is dropped) and
``api_key`` (``os.environ/NAME`` reads the variable). The calls are plain JSON over HTTP
(``/embeddings``, ``/chat/completions`` at temperature 0); their answers are recorded in each
decision's reason.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from memtap.adapters.model_endpoint import resolve_model
from memtap.errors import ConfigError
from memtap.probes.schema import Probe
from memtap.scoring.align import DefaultMatcher, EmbeddingMatcher, JudgeMatcher, Matcher
from memtap.scoring.permission import classify_permission, llm_permission_judge

__all__ = ["make_matcher", "make_permission_judge"]


def make_matcher(spec: str, config: Path | None) -> Matcher:
    kind, _, name = spec.partition(":")
    if spec == "default":
        return DefaultMatcher()
    if kind == "embedding" and name:
        return EmbeddingMatcher(resolve_model(name, config).embed, name=spec)
    if kind == "llm" and name:
        return JudgeMatcher(resolve_model(name, config).chat, name=spec)
    raise ConfigError(f"--matcher {spec!r}: use default, embedding:MODEL or llm:MODEL")


def make_permission_judge(
    spec: str, config: Path | None
) -> Callable[[Probe, dict[str, Any] | None], tuple[str, str]]:
    kind, _, name = spec.partition(":")
    if spec == "rules":
        return classify_permission
    if kind == "llm" and name:
        return llm_permission_judge(resolve_model(name, config).chat)
    raise ConfigError(f"--permission-judge {spec!r}: use rules or llm:MODEL")
