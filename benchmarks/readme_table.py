"""Render bench-results/cache_targets.json as the README's cache benchmark table
(between the ``<!-- cache-bench -->`` markers)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

NAMES = {
    ("raw", "full"): "full mode, raw",
    ("raw", "delta"): "delta, raw",
    ("memory", "delta"): "delta + guard + memory cache",
    ("redis", "delta"): "delta + guard + Redis cache (one process)",
    ("redis-writer", "delta"): "delta + Redis, writer of the cold thread",
}
GOALS = {
    "memory_flatness_last10_over_first10": "memory cache: last-10 / first-10 per turn",
    "memory_last10_over_full_last10": "memory cache last-10 / raw full last-10",
    "memory_head_read_over_full": "memory cache head get_state / raw full",
    "cold_redis_head_over_raw_delta_head": "fresh process, Redis warm / raw delta head read",
    "alternating_last10_over_one_process_redis_last10": "two workers alternating / one (Redis)",
}


def render(report: dict) -> str:
    lines = [
        f"Medians of {report.get('repetitions', 1)} repetitions.",
        "",
        "| case | turns | first 10 ms/turn | last 10 ms/turn | head get_state ms | cold read ms |",
        "|---|---|---|---|---|---|",
    ]
    for r in report["rows"]:
        key = (r["stack"], r.get("mode"))
        if key in NAMES:
            lines.append(
                f"| {NAMES[key]} | {r['turns']} | {r['first10_ms']:.1f} | {r['last10_ms']:.1f} "
                f"| {r['head_read_ms']:.1f} | |"
            )
        elif "cold_head_read_ms" in r:
            label = (
                "fresh process, raw delta" if r["stack"] == "raw" else "fresh process, Redis warm"
            )
            lines.append(f"| {label} | {r['messages'] // 2} | | | | {r['cold_head_read_ms']:.1f} |")
        elif r["stack"] == "redis-2-workers":
            lines.append(
                f"| two processes alternating turns, Redis | {r['turns']} | {r['first10_ms']:.1f} "
                f"| {r['last10_ms']:.1f} | | |"
            )
    lines += ["", "| target | measured | goal | met |", "|---|---|---|---|"]
    for key, target in report["targets"].items():
        met = "yes" if target["met"] else "no"
        lines.append(f"| {GOALS[key]} | {target['value']:.2f}x | <= {target['target']}x | {met} |")
    ratios = report["ratios"]
    lines.append(
        f"| (context) raw delta / raw full, last-10 | "
        f"{ratios['raw_delta_last10_over_full_last10']:.2f}x | | |"
    )
    lines.append(
        f"| (context) Redis one process / raw full, last-10 | "
        f"{ratios['redis_last10_over_full_last10']:.2f}x | | |"
    )
    return "\n".join(lines)


def main() -> int:
    report = json.loads(
        Path(sys.argv[1] if len(sys.argv) > 1 else "bench-results/cache_targets.json").read_text()
    )
    readme = Path("README.md")
    text = readme.read_text()
    block = "<!-- cache-bench -->\n" + render(report) + "\n<!-- /cache-bench -->"
    new, count = re.subn(r"<!-- cache-bench -->.*?<!-- /cache-bench -->", block, text, flags=re.S)
    if count != 1:
        raise SystemExit("README has no <!-- cache-bench --> block")
    readme.write_text(new)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
