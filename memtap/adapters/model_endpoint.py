"""One model of the config file's ``model_list``, called over the OpenAI-compatible HTTP API.

Used where memtap itself asks a model something outside the chat proxy's hot path: the
scoring judges and matchers, the replay's LLM reader and the suite paraphraser. The model's
``litellm_params`` give the endpoint (``api_base``, ``model`` without its provider prefix,
``api_key`` with ``os.environ/NAME`` resolved), as the chat proxy reads them. Calls are plain,
blocking JSON over HTTP (``/chat/completions`` at temperature 0, ``/embeddings``).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from memtap.errors import BackendError, ConfigError

__all__ = ["Endpoint", "resolve_model"]


class Endpoint:
    """One model behind an OpenAI-compatible HTTP API."""

    def __init__(self, base_url: str, model: str, api_key: str | None = None, timeout: float = 60.0) -> None:
        self.base_url, self.model, self.api_key, self.timeout = base_url.rstrip("/"), model, api_key, timeout

    def _post(self, path: str, body: dict[str, Any]) -> Any:
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        request = urllib.request.Request(
            self.base_url + path, data=json.dumps(body).encode(), headers=headers, method="POST"
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return json.load(response)
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise BackendError(f"model {self.model} at {self.base_url}{path}: {exc}") from None

    def chat(self, prompt: str, *, max_tokens: int | None = None) -> str:
        body: dict[str, Any] = {
            "model": self.model,
            "temperature": 0,
            "messages": [{"role": "user", "content": prompt}],
        }
        if max_tokens is not None:
            body["max_tokens"] = max_tokens
        data = self._post("/chat/completions", body)
        try:
            return str(data["choices"][0]["message"]["content"] or "")
        except (KeyError, IndexError, TypeError):
            raise BackendError(f"model {self.model}: a chat reply without choices[0].message") from None

    def embed(self, texts: list[str]) -> list[list[float]]:
        data = self._post("/embeddings", {"model": self.model, "input": texts})
        try:
            return [[float(x) for x in item["embedding"]] for item in data["data"]]
        except (KeyError, TypeError, ValueError):
            raise BackendError(f"model {self.model}: an embeddings reply without data[].embedding") from None


def resolve_model(name: str, config: Path | None) -> Endpoint:
    if config is None:
        raise ConfigError(f"model {name!r}: pass --config FILE whose model_list names it")
    from memtap.adapters.llm import upstream_from_entry
    from memtap.config import load_config

    for entry in load_config(config).model_list:
        if entry.model_name != name:
            continue
        upstream = upstream_from_entry(entry, None, default_timeout=60.0)
        if upstream.via != "passthrough":
            raise ConfigError(
                f"model {name!r} in {config}: judges speak the OpenAI API; "
                f"provider {upstream.provider} needs an OpenAI-compatible api_base"
            )
        return Endpoint(upstream.url(""), upstream.model, upstream.key(), upstream.timeout)
    raise ConfigError(f"model {name!r} is not in the model_list of {config}")
