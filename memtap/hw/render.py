"""The hardware figures as text lines (``memtap hw report``, ``memtap replay``, ``memtap score``)."""

from __future__ import annotations

from typing import Any

__all__ = ["render_chats", "render_header", "render_replay_figures"]


def _num(value: Any, unit: str = "", digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}{unit}"


def render_header(f: dict[str, Any]) -> list[str]:
    lines = [
        f"hw runs {', '.join(f['hw_runs'])}: {f['samples']} samples every {f['interval_ms']:g} ms "
        f"({f['dropped']} dropped, {f['gaps']} gaps), sampler CPU {_num(f['sampler_cpu_s'], ' s')} "
        f"over {_num(f['wall_s'], ' s', 1)}",
        f"  {f['note']}",
    ]
    for d in f["devices"]:
        extra = f" (driver {d.get('driver')})" if d["kind"] == "gpu" else f" ({d.get('cpus')} CPUs)"
        lines.append(f"  {d['device']}: {d['name']}{extra}")
    base = f["baseline"]
    if base.get("window_s"):
        parts = []
        if "energy_j_per_s" in base:
            parts.append(f"GPU {_num(base['energy_j_per_s'], ' W', 1)}")
        if "host_cpu_s_per_s" in base:
            parts.append(f"host {_num(base['host_cpu_s_per_s'], ' cores', 3)}")
        if "memtap_cpu_s_per_s" in base:
            parts.append(f"memtap {_num(base['memtap_cpu_s_per_s'], ' cores', 3)}")
        lines.append(
            f"  idle baseline over {base['window_s']:.1f} s before the work, subtracted: {', '.join(parts)}"
        )
    else:
        lines.append("  no idle baseline measured (--hw-baseline 0): figures are gross")
    if f["mean_power_w"] is not None:
        agree = f["energy_counter_vs_power"]
        lines.append(
            f"  GPU: mean power {_num(f['mean_power_w'], ' W', 1)}, "
            f"utilisation {_num(f['gpu_util_mean'], '%', 1)}, "
            f"peak temperature {_num(f['peak_temp_c'], ' C', 0)}"
            + (
                f", integrated power vs energy counter {_num(agree['difference_pct'], '%', 2)}"
                if agree
                else ", no energy counter"
            )
        )
    lines.append(f"  host CPU utilisation mean {_num(f['host_cpu_util_mean'], '%', 1)}")
    return lines


def render_replay_figures(f: dict[str, Any]) -> list[str]:
    lines = render_header(f)
    names = {
        "energy_j": ("GPU energy", " J"),
        "host_cpu_s": ("host CPU", " core-s"),
        "memtap_cpu_s": ("memtap CPU", " s"),
    }
    for quantity, (label, unit) in names.items():
        if quantity not in f["per_query"]:
            continue
        lines.append(
            f"  {label}: {_num(f['per_query'][quantity], unit, 4)} per query ({f['queries']}), "
            f"{_num(f['per_session'][quantity], unit, 4)} per ingested session ({f['sessions']}), "
            f"{_num(f['per_episode'][quantity], unit, 4)} per episode ({f['episodes']})"
        )
    return lines


def render_chats(f: dict[str, Any]) -> list[str]:
    s = f["chat_summary"]
    lines = [f"chat calls: {s['calls']}"]
    if not s["calls"]:
        return lines

    def mean(key: str) -> str:
        return "-" if s[key] is None else f"{s[key]['mean']:.1f}"

    lines.append(
        f"  mean split (ms): memory search {mean('memory_ms')} · proxy {mean('proxy_ms')} · model "
        f"{mean('model_ms')} (time to first token {mean('ttft_ms')}, generation {mean('generation_ms')}) "
        f"· total {mean('total_ms')}"
    )
    if s["energy_j"] is not None:
        lines.append(
            f"  GPU energy per chat: mean {s['energy_j']['mean']:.3f} J, p50 {s['energy_j']['p50']:.3f} J"
        )
    header = ["id", "model", "memory", "proxy", "ttft", "generation", "total", "J", "W"]
    rows = [
        [
            c["id"],
            c["model"] or "-",
            *(_num(c[k], "", 1) for k in ("memory_ms", "proxy_ms", "ttft_ms", "generation_ms", "total_ms")),
            _num(c["energy_j"], "", 3),
            _num(c["mean_power_w"], "", 1),
        ]
        for c in f["chats"]
    ]
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        lines.append("  " + "  ".join(str(v).ljust(w) for v, w in zip(row, widths, strict=True)))
    return lines
