"""The hardware probe's device check: real GPU power and energy for real chats through memtap.

One command, on a machine with one NVIDIA GPU, PyTorch and nvidia-ml-py (no network, no model
download):

    PYTHONPATH=. python benchmarks/hw_probe_gpu.py [--chats 300] [--record samples.jsonl]

It builds a small decoder-only transformer from a config with random weights (GPT-2 from
``transformers`` when it is installed, else a hand-written torch decoder), serves it behind a
tiny OpenAI-compatible endpoint (stdlib HTTP, streaming), starts ``memtap serve --config`` with a
model_list pointing at that endpoint and ``--hw-probe`` (10 Hz, 3 s idle baseline), sends the
chats through memtap from a few concurrent clients, stops memtap, and prints from the trace
database: energy per query, mean power, GPU utilisation, peak temperature, the time split
(memory search, proxy, model: time to first token and generation), the sampler's CPU, and the
agreement between integrated power and the device's energy counter (aim: within 5%; exit 1
when it is not). Without a GPU it stops at once with one line. Budget: under 5 minutes.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def fail(message: str) -> None:
    print(f"hw_probe_gpu: {message}", file=sys.stderr)
    raise SystemExit(2)


def check_gpu() -> Any:
    """torch with CUDA and NVML seeing a device, or one line and exit 2."""
    try:
        import pynvml
    except ImportError:
        fail("nvidia-ml-py is not installed (pip install nvidia-ml-py)")
    try:
        pynvml.nvmlInit()
        count = pynvml.nvmlDeviceGetCount()
        pynvml.nvmlShutdown()
    except pynvml.NVMLError as exc:
        fail(f"no NVIDIA driver (NVML: {exc}); run this on a machine with an NVIDIA GPU")
    try:
        import torch
    except ImportError:
        fail("PyTorch is not installed (pip install torch); this check needs a GPU and PyTorch")
    if count == 0 or not torch.cuda.is_available():
        fail("no NVIDIA GPU (NVML found none, or torch.cuda.is_available() is False)")
    return torch


def build_model(torch: Any, args: argparse.Namespace) -> tuple[Any, str]:
    """A random-weight decoder-only LM on the GPU, in half precision."""
    try:
        from transformers import GPT2Config, GPT2LMHeadModel

        config = GPT2Config(
            vocab_size=args.vocab, n_positions=1024, n_embd=args.width, n_layer=args.layers, n_head=16
        )
        with torch.device("cuda"):  # initialise on the GPU: random init of ~1B weights on a CPU is slow
            model = GPT2LMHeadModel(config).half().eval()
        return model, f"GPT-2 config (transformers), {args.layers} layers x {args.width}, random weights"
    except ImportError:
        pass
    nn = torch.nn

    class Decoder(nn.Module):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(args.vocab, args.width)
            self.pos = nn.Embedding(1024, args.width)
            layer = nn.TransformerEncoderLayer(
                args.width, 16, 4 * args.width, batch_first=True, norm_first=True
            )
            self.blocks = nn.TransformerEncoder(layer, args.layers)
            self.head = nn.Linear(args.width, args.vocab, bias=False)

        def forward(self, ids: Any) -> Any:
            n = ids.shape[1]
            mask = torch.nn.Transformer.generate_square_subsequent_mask(
                n, device=ids.device, dtype=torch.half
            )
            x = self.embed(ids) + self.pos(torch.arange(n, device=ids.device))
            return self.head(self.blocks(x, mask=mask, is_causal=True))

    with torch.device("cuda"):
        model = Decoder().half().eval()
    return model, f"hand-written torch decoder, {args.layers} layers x {args.width}, random weights"


class Generator:
    """Greedy generation, one request at a time on the GPU (a lock), token by token."""

    def __init__(self, torch: Any, model: Any, vocab: int) -> None:
        self.torch, self.model, self.vocab = torch, model, vocab
        self.lock = threading.Lock()

    def tokens(self, text: str, limit: int) -> list[int]:
        return [b % self.vocab for b in text.encode()][-limit:] or [0]

    def stream(self, prompt: list[int], new: int) -> Any:
        torch = self.torch
        with self.lock, torch.inference_mode():
            ids = torch.tensor([prompt], device="cuda")
            for _ in range(new):
                out = self.model(ids)
                logits = out.logits if hasattr(out, "logits") else out
                nxt = logits[:, -1, :].argmax(-1, keepdim=True)
                ids = torch.cat([ids, nxt], dim=1)
                yield int(nxt.item())


class SmokeGenerator(Generator):
    """--smoke: the same endpoint and flow with no model (arithmetic tokens), to check the script's
    plumbing on a machine without a GPU. Not a measurement."""

    def __init__(self, vocab: int) -> None:
        self.vocab = vocab

    def stream(self, prompt: list[int], new: int) -> Any:
        for i in range(new):
            yield (sum(prompt) + i) % self.vocab


def make_handler(gen: Generator, args: argparse.Namespace) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *a: Any) -> None:
            return

        def do_GET(self) -> None:
            body = b'{"ok": true}' if self.path.endswith("healthz") else b'{"data": [{"id": "tiny"}]}'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self) -> None:
            request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            text = " ".join(str(m.get("content", "")) for m in request["messages"])
            prompt = gen.tokens(text, args.prompt)
            stream = bool(request.get("stream"))
            head = {"id": f"chatcmpl-{time.monotonic_ns()}", "created": int(time.time()), "model": "tiny"}
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream" if stream else "application/json")
            self.send_header("Connection", "close")
            self.end_headers()
            words = []
            for token in gen.stream(prompt, args.tokens):
                word = chr(97 + token % 26)
                words.append(word)
                if stream:
                    delta = {"index": 0, "delta": {"content": word}, "finish_reason": None}
                    chunk = {**head, "object": "chat.completion.chunk", "choices": [delta]}
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                    self.wfile.flush()
            usage = {"prompt_tokens": len(prompt), "completion_tokens": len(words),
                     "total_tokens": len(prompt) + len(words)}  # fmt: skip
            if stream:
                delta = {"index": 0, "delta": {}, "finish_reason": "stop"}
                last = {**head, "object": "chat.completion.chunk", "choices": [delta], "usage": usage}
                self.wfile.write(f"data: {json.dumps(last)}\n\ndata: [DONE]\n\n".encode())
            else:
                message = {"role": "assistant", "content": "".join(words)}
                choice = {"index": 0, "message": message, "finish_reason": "stop"}
                answer = {**head, "object": "chat.completion", "choices": [choice], "usage": usage}
                self.wfile.write(json.dumps(answer).encode())
            self.wfile.flush()

    return Handler


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(url: str, proc: subprocess.Popen[bytes] | None = None, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            fail(f"memtap exited with {proc.returncode} before it was ready")
        try:
            with urllib.request.urlopen(url, timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    fail(f"{url} did not answer within {timeout:.0f} s")


def chat(url: str, i: int, stream: bool) -> None:
    question = f"Question {i}: what did I say about the garden? " * 3
    body = {
        "model": "tiny",
        "user": f"user-{i % 8}",
        "stream": stream,
        "messages": [{"role": "user", "content": question}],
    }
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as resp:
        resp.read()


def record(db: Path, run: str, path: Path) -> None:
    """The probe's samples in the replay source's JSON Lines format (tests/data/hw)."""
    from memtap.hw.sources import SAMPLE_FIELDS

    conn = sqlite3.connect(db)
    with path.open("w") as out:
        for device, kind, name, info in conn.execute(
            "SELECT device, kind, name, info FROM hw_devices WHERE run_id = ?", (run,)
        ):
            out.write(
                json.dumps(
                    {"device": {"device": device, "kind": kind, "name": name, "info": json.loads(info)}}
                )
                + "\n"
            )
        cols = ", ".join(SAMPLE_FIELDS)
        for row in conn.execute(
            f"SELECT {cols} FROM hw_samples WHERE run_id = ? ORDER BY ts, device", (run,)
        ):
            out.write(
                json.dumps({k: v for k, v in zip(SAMPLE_FIELDS, row, strict=True) if v is not None}) + "\n"
            )
    conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chats", type=int, default=300)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=48, help="tokens generated per chat")
    parser.add_argument("--prompt", type=int, default=256, help="prompt tokens kept (bytes of the messages)")
    parser.add_argument("--layers", type=int, default=16)
    parser.add_argument("--width", type=int, default=2048)
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--record", type=Path, help="write the probe's samples here (JSON Lines)")
    parser.add_argument(
        "--budget", type=float, default=180.0, help="seconds of chats at most (then stop sending)"
    )
    parser.add_argument("--smoke", action="store_true", help="no GPU, no model: check the plumbing only")
    args = parser.parse_args()
    started = time.monotonic()
    gen: Generator
    if args.smoke:
        gen, described = SmokeGenerator(args.vocab), "none (--smoke: plumbing only, not a measurement)"
    else:
        torch = check_gpu()
        model, described = build_model(torch, args)
        gen = Generator(torch, model, args.vocab)
        for _ in gen.stream(gen.tokens("warm up", args.prompt), 4):
            pass
        torch.cuda.synchronize()
    up_port, memtap_port = free_port(), free_port()
    server = ThreadingHTTPServer(("127.0.0.1", up_port), make_handler(gen, args))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    wait_for(f"http://127.0.0.1:{up_port}/healthz")
    with tempfile.TemporaryDirectory() as tmp:
        db, config = Path(tmp) / "hw.db", Path(tmp) / "memtap.json"
        params = {"model": "openai/tiny", "api_base": f"http://127.0.0.1:{up_port}/v1", "api_key": "none"}
        config.write_text(json.dumps({"model_list": [{"model_name": "tiny", "litellm_params": params}],
                                      "memtap": {"memory": "auto"}}))  # fmt: skip
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        memtap = subprocess.Popen(
            [sys.executable, "-m", "memtap", "serve", "--http", f"127.0.0.1:{memtap_port}", "--db", str(db),
             "--config", str(config), "--hw-probe", "--hw-interval", "100", "--hw-baseline", "3"],
            env=env, stderr=subprocess.PIPE,
        )  # fmt: skip
        try:
            wait_for(f"http://127.0.0.1:{memtap_port}/healthz", memtap)
            url = f"http://127.0.0.1:{memtap_port}/v1/chat/completions"
            todo = iter(range(args.chats))
            errors: list[str] = []
            sent: list[int] = []
            deadline = time.monotonic() + args.budget

            def worker() -> None:
                for i in todo:
                    if time.monotonic() > deadline:
                        break
                    sent.append(i)
                    try:
                        chat(url, i, stream=i % 2 == 0)
                    except Exception as exc:
                        errors.append(f"{type(exc).__name__}: {exc}")

            t0 = time.monotonic()
            threads = [threading.Thread(target=worker) for _ in range(args.concurrency)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            wall = time.monotonic() - t0
        finally:
            memtap.send_signal(signal.SIGTERM)
            _, err = memtap.communicate(timeout=60)
        server.shutdown()
        note = next(
            (line for line in err.decode().splitlines() if line.startswith("hw-probe:")), "(no probe line)"
        )
        from memtap.hw.figures import chat_figures

        conn = sqlite3.connect(db)
        [(hw_run,)] = conn.execute("SELECT id FROM hw_runs").fetchall()
        f = chat_figures(conn, hw_run)
        conn.close()
        if args.record:
            record(db, hw_run, args.record)
    s = f["chat_summary"]

    def mean(key: str) -> str:
        return "-" if s.get(key) is None else f"{s[key]['mean']:.3f}"

    gpus = [d for d in f["devices"] if d["kind"] == "gpu"]
    print(f"model: {described}")
    print(f"{len(sent)} of {args.chats} chats ({args.concurrency} concurrent, {args.tokens} tokens each, "
          f"half streamed) in {wall:.1f} s; {len(errors)} failed")  # fmt: skip
    print(note)
    for d in gpus:
        print(
            f"device {d['device']}: {d['name']}, driver {d.get('driver')}, "
            f"energy counter {d.get('energy_counter')}"
        )
    print(f"samples {f['samples']} every {f['interval_ms']:g} ms ({f['dropped']} dropped, {f['gaps']} gaps); "
          f"sampler CPU {f['sampler_cpu_s']} s over {f['wall_s']} s = "
          f"{100 * (f['sampler_cpu_s'] or 0) / (f['wall_s'] or 1):.3f}% of one core")  # fmt: skip
    base = f["baseline"].get("energy_j_per_s")
    print(
        f"idle baseline {base if base is None else round(base, 1)} W "
        f"over {f['baseline']['window_s']} s (subtracted)"
    )
    print(f"energy per query: {mean('energy_j')} J (net of idle), "
          f"mean power over the run {f['mean_power_w']} W, GPU utilisation mean {f['gpu_util_mean']}%, "
          f"peak temperature {f['peak_temp_c']} C")  # fmt: skip
    print(f"time split per chat (mean ms): memory search {mean('memory_ms')}, proxy {mean('proxy_ms')}, "
          f"model {mean('model_ms')} (time to first token {mean('ttft_ms')}, "
          f"generation {mean('generation_ms')}), "
          f"total {mean('total_ms')}")  # fmt: skip
    agree = f["energy_counter_vs_power"]
    ok = True
    if agree is None:
        print("energy counter: not available on this device; energy integrated from power samples")
    else:
        ok = agree["difference_pct"] is not None and abs(agree["difference_pct"]) <= 5.0
        print(f"integrated power {agree['integrated_j']} J vs energy counter {agree['counter_j']} J over "
              f"{agree['seconds']} s: {agree['difference_pct']}% "
              f"({'within' if ok else 'NOT within'} 5%)")  # fmt: skip
    print(f"total time {time.monotonic() - started:.1f} s")
    if errors:
        print(f"first error: {errors[0]}")
    raise SystemExit(0 if ok and not errors else 1)


if __name__ == "__main__":
    main()
