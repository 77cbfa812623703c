"""No configured secret reaches anything memtap writes. A real `memtap serve` (verbose log and
console spans to a file, content capture on) is given an API key and an upstream key, and a
caller that holds the API key tries to smuggle both into the trace through headers, `_meta`,
tool arguments, chat body fields and `X-Memtap-*` headers; then every file memtap wrote is
searched for each secret."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from conftest import START_TIMEOUT_S, http_client, meta

from memtap.probes.targets._server import announced_port, wait_healthy
from memtap.trace.store import TraceStore

API_KEY = "sk-memtap-alice-5c1e7d"
UPSTREAM_KEY = "sk-upstream-conf-0b9a44"
SECRETS = (API_KEY, UPSTREAM_KEY)


@pytest.fixture
def served(tmp_path: Path, upstream: Any) -> Any:
    config = tmp_path / "memtap.yaml"  # the keys come from the environment, not from this file
    config.write_text(f"""
model_list:
  - model_name: gpt-fake
    litellm_params: {{model: openai/fake-1, api_base: "{upstream.base_url}", api_key: os.environ/UPSTREAM_KEY}}
  - model_name: via-litellm
    litellm_params: {{model: openai/fake-1, api_base: "{upstream.base_url}", api_key: os.environ/UPSTREAM_KEY}}
memtap:
  memory: auto
  routes: {{via-litellm: {{via: litellm}}}}
""")
    db = tmp_path / "data" / "trace.db"
    db.parent.mkdir()
    log = tmp_path / "stderr.log"
    env = {**os.environ, "MEMTAP_API_KEYS": f"{API_KEY}=alice", "UPSTREAM_KEY": UPSTREAM_KEY,
           "MEMTAP_OTEL_CAPTURE_CONTENT": "true"}  # fmt: skip
    with log.open("wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "memtap", "serve", "--http", "127.0.0.1:0", "--db", str(db),
             "--config", str(config), "--console-spans", "-v"],
            stdout=subprocess.DEVNULL, stderr=err, env=env,
        )  # fmt: skip
    try:
        port = announced_port(lambda: log.read_text(errors="replace"), proc, START_TIMEOUT_S)
        healthy = port and wait_healthy(f"http://127.0.0.1:{port}", proc, START_TIMEOUT_S)
        assert healthy, log.read_text()
        yield port, db, log, proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


async def _smuggle_over_mcp(port: int) -> list[str]:
    """Each attempt is a call the caller holds the key for; returns the errors memtap answered."""
    url = f"http://127.0.0.1:{port}/mcp"
    auth = {"Authorization": f"Bearer {API_KEY}"}
    errors = []
    async with http_client(url, auth) as client:
        ok = await client.call_tool("memory_add", {"content": "alice likes green tea"})
        assert not ok.is_error
        attempts = [
            ("memory_add", {"content": f"my key is {API_KEY}"}, None),
            ("memory_add", {"content": "note", "metadata": {"k": UPSTREAM_KEY}}, None),
            ("memory_search", {"query": f"find {UPSTREAM_KEY}"}, None),
            ("memory_add", {"content": "note", "session": API_KEY}, None),
            ("memory_add", {"content": "note"}, meta(run=UPSTREAM_KEY)),
            (API_KEY, {"content": "unknown tool named like a key"}, None),
        ]
        for tool, args, call_meta in attempts:
            result = await client.call_tool(tool, args, meta=call_meta)
            assert result.is_error
            errors.append(str(result.content[0].text))  # type: ignore[union-attr]
    for header in ("X-Memtap-Session", "X-Memtap-Namespace", "X-Memtap-Run", "X-Memtap-Principal"):
        async with http_client(url, {**auth, header: UPSTREAM_KEY}) as client:
            result = await client.call_tool("memory_add", {"content": "via a header"})
            if header != "X-Memtap-Principal":  # with keys, the principal header is not read at all
                assert result.is_error
                errors.append(str(result.content[0].text))  # type: ignore[union-attr]
    return errors


def _smuggle_over_chat(port: int) -> None:
    client = openai.OpenAI(api_key=API_KEY, base_url=f"http://127.0.0.1:{port}/v1", max_retries=0)
    for model in ("gpt-fake", "via-litellm"):
        reply = client.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": f"remember {UPSTREAM_KEY} and {API_KEY} [chunks 2]"}],
            extra_headers={"X-Memtap-Run": UPSTREAM_KEY, "X-Memtap-Session": API_KEY},
        )
        assert reply.choices[0].message.content == "chunk-0 chunk-1 "
        with pytest.raises(openai.PermissionDeniedError):  # `user` names a namespace alice may not use
            client.chat.completions.create(
                model=model, messages=[{"role": "user", "content": "hi"}], user=API_KEY
            )
        for body in (
            {"api_key": UPSTREAM_KEY},
            {"base_url": API_KEY},
            {"litellm_params": {"api_key": API_KEY}},
        ):
            with pytest.raises(openai.BadRequestError):
                client.chat.completions.create(
                    model=model, messages=[{"role": "user", "content": "hi"}], extra_body=body
                )
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model=UPSTREAM_KEY, messages=[{"role": "user", "content": "hi"}])
    response = httpx.post(
        f"http://127.0.0.1:{port}/v1/embeddings",
        json={"model": "gpt-fake", "input": "x", "api_key": UPSTREAM_KEY},
        headers={"Authorization": f"Bearer {API_KEY}"},
        timeout=10,
    )
    assert response.status_code == 400


def _wait_for_events(db: Path, *, chats: int, embeds: int, timeout: float = 20.0) -> None:
    """Poll the trace (read-only) until the calls made are recorded: chats answer before their
    event is written."""
    deadline = time.monotonic() + timeout
    while True:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        try:
            counts = dict(conn.execute("SELECT op, count(*) FROM events GROUP BY op").fetchall())
        finally:
            conn.close()
        if counts.get("chat", 0) >= chats and counts.get("embed", 0) >= embeds:
            return
        assert time.monotonic() < deadline, counts
        time.sleep(0.02)


@pytest.mark.anyio
async def test_no_configured_secret_reaches_any_file_memtap_writes(served: Any, tmp_path: Path) -> None:
    port, db, log, proc = served
    errors = await _smuggle_over_mcp(port)
    # Refused as carrying a secret, as an unknown tool, or (a namespace named like a key) by the
    # grants, which allow alice her own namespace only.
    reasons = ("configured secrets", "unknown tool", "may not write namespace")
    assert all(any(r in e for r in reasons) for e in errors), errors
    _smuggle_over_chat(port)
    # While it still serves: the file, its WAL and shared memory, once the last calls are recorded.
    _wait_for_events(db, chats=11, embeds=1)
    live = {p.name: p.read_bytes() for p in db.parent.glob(db.name + "*")}
    assert "trace.db-wal" in live
    for name, data in live.items():
        for secret in SECRETS:
            assert secret.encode() not in data, f"{secret} found in {name} while serving"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0

    written = [p for p in tmp_path.rglob("*") if p.is_file() and p.name != "memtap.yaml"]
    names = {p.name for p in written}
    assert {"trace.db", "stderr.log"} <= names
    stderr = log.read_text(errors="replace")
    assert "memtap.event_id" in stderr and "[redacted]" in stderr  # spans were printed, redacted
    for path in written:
        data = path.read_bytes()
        for secret in SECRETS:
            assert secret.encode() not in data, f"{secret} found in {path.name}"

    store = TraceStore(db)
    try:
        events = store.list_events()
    finally:
        store.close()
    refused = [e for e in events if e.status == "error" and "configured secrets" in (e.error or "")]
    assert len(refused) >= 8
    chats = [e for e in events if e.op.value == "chat" and e.status == "ok"]
    assert len(chats) == 2
    for chat in chats:
        assert chat.arguments["messages"][0]["content"] == "remember [redacted] and [redacted] [chunks 2]"
        assert chat.context.namespace == "alice" and chat.context.run == "[redacted]"
        assert chat.context.session == "[redacted]"
        # auto mode tried to capture the message into memory: refused, as a write carrying a secret
        assert "configured secrets" in chat.result["memory"]["capture_errors"][0]


def test_log_lines_and_tracebacks_are_redacted() -> None:
    import io
    import logging

    from memtap.trace.privacy import RedactingFilter, TracePrivacy

    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.addFilter(RedactingFilter(TracePrivacy(secrets=SECRETS)))
    logger = logging.getLogger("memtap.test-redaction")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        logger.warning("upstream said %s", f"bad key {UPSTREAM_KEY}")
        try:
            raise RuntimeError(f"refused {API_KEY}")
        except RuntimeError:
            logger.exception("call failed for %s", API_KEY)
    finally:
        logger.removeHandler(handler)
    text = out.getvalue()
    assert "upstream said bad key [redacted]" in text and "RuntimeError: refused [redacted]" in text
    assert all(secret not in text for secret in SECRETS)
