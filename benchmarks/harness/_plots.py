"""PNG plots of a run (matplotlib, Agg backend; the ``bench`` extra).

- ``latency_vs_turns.png``: per-turn latency against the turn number (rolling
  median of 10 turns, element-wise median over repetitions), one panel per backend
  and thread length that has two or more configurations.
- ``storage_vs_turns.png``: logical stored bytes against turns (log-log), sampled
  during the longest thread of each mode and cadence.
- ``reads_cold_warm.png``: head ``get_state`` warm (same process) and cold (a fresh
  process; for Redis also a plain reader of the same file), one panel per
  persistent backend and thread length.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ._summary import ConfigKey, Summary, config_sort_key

__all__ = ["PlotsUnavailableError", "write_plots"]

ROLLING = 10
MAX_PANELS = 9


class PlotsUnavailableError(ImportError):
    """matplotlib is not installed."""


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError as exc:
        raise PlotsUnavailableError(
            "plots need matplotlib: pip install 'checkpoint-guard[bench]' "
            "(or run the summarizer without --plots)"
        ) from exc
    matplotlib.use("Agg")  # files only; never a display
    import matplotlib.pyplot as plt

    return plt


def _label(key: ConfigKey) -> str:
    kind, _backend, _turns, _payload, stack, mode, frequency = key
    cadence = f" F={frequency}" if frequency is not None else ""
    two = ", 2 workers" if kind == "alternating" else ""
    return f"{stack} {mode}{cadence}{two}"


def _rolling_median(values: Sequence[float], width: int) -> list[float]:
    return [statistics.median(values[max(0, i - width + 1) : i + 1]) for i in range(len(values))]


def _elementwise_median(series: Sequence[Sequence[float]]) -> list[float]:
    n = min(len(s) for s in series)
    return [statistics.median(s[i] for s in series) for i in range(n)]


def _backends(summary: Summary) -> list[str]:
    order = ["memory", "sqlite", "postgres"]
    present = {k[1] for k in summary.configs}
    return [b for b in order if b in present] + sorted(present - set(order))


def _groups(summary: Summary, *, persistent: bool = False) -> list[tuple[str, int]]:
    """(backend, turns) panels: every group with two or more configurations (or
    with a fresh-process read, for ``persistent``), at most ``MAX_PANELS``."""
    counts = Counter((k[1], k[2]) for k in summary.configs)
    cold = {(k[1], k[2]) for k, c in summary.configs.items() if c["head_cold"] is not None}
    order = {b: i for i, b in enumerate(_backends(summary))}
    keys = [g for g in counts if (g in cold if persistent else counts[g] >= 2)]
    return sorted(keys, key=lambda g: (order[g[0]], g[1]))[:MAX_PANELS]


def _grid(plt: Any, n: int, width: float) -> tuple[Any, list[Any]]:
    cols = min(3, max(1, n))
    rows = -(-max(1, n) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(width * cols, 4.5 * rows), squeeze=False)
    flat = [ax for row in axes for ax in row]
    for ax in flat[n:]:
        ax.set_visible(False)
    return fig, flat[:n]


def _latency(plt: Any, summary: Summary, path: Path) -> None:
    groups = _groups(summary)
    fig, axes = _grid(plt, len(groups), 6.5)
    for ax, (backend, turns) in zip(axes, groups, strict=True):
        for key, c in sorted(summary.configs.items(), key=lambda kv: config_sort_key(kv[0])):
            if key[1] != backend or key[2] != turns:
                continue
            series = [r["latencies_ms"] for r in c["rows"] if r.get("latencies_ms")]
            if not series:
                continue
            y = _rolling_median(_elementwise_median(series), ROLLING)
            style = "--" if key[5] == "full" else "-"
            ax.plot(range(1, len(y) + 1), y, style, label=_label(key), linewidth=1.2)
        ax.set_title(f"{backend}: per-turn latency, {turns}-turn threads")
        ax.set_xlabel("turn")
        ax.set_ylabel(f"ms per turn (rolling median of {ROLLING})")
        ax.set_yscale("log")
        ax.grid(True, which="both", alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _storage(plt: Any, summary: Summary, path: Path) -> None:
    backends = _backends(summary)
    fig, axes = plt.subplots(1, len(backends), figsize=(6 * len(backends), 4.5), squeeze=False)
    for ax, backend in zip(axes[0], backends, strict=True):
        # storage does not depend on the stack: one curve per mode and cadence,
        # from the longest thread's in-run samples (raw stack preferred)
        curves: dict[str, tuple[tuple[int, int], list[tuple[int, float]]]] = {}
        for key, c in summary.configs.items():
            if key[1] != backend or key[0] != "thread":
                continue
            samples = next(
                (r["storage_by_turns"] for r in c["rows"] if r.get("storage_by_turns")), None
            )
            if not samples:
                continue
            label = f"{key[5]}" + (f" F={key[6]}" if key[6] is not None else "")
            rank = (key[2], key[4] == "raw")
            if label not in curves or rank > curves[label][0]:
                curves[label] = (rank, [(n, b) for n, b in samples if b])
        for label, (_, points) in sorted(curves.items()):
            points.sort()
            style = "o--" if label == "full" else "o-"
            ax.plot([p[0] for p in points], [p[1] / 1e6 for p in points], style, label=label)
        ax.set_title(f"{backend}: stored bytes (logical)")
        ax.set_xlabel("turns")
        ax.set_ylabel("MB")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.grid(True, which="both", alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _reads(plt: Any, summary: Summary, path: Path) -> None:
    groups = _groups(summary, persistent=True)
    fig, axes = _grid(plt, len(groups), 7.0)
    for ax, (backend, turns) in zip(axes, groups, strict=True):
        keys = sorted(
            (k for k in summary.configs if k[1] == backend and k[2] == turns and k[0] == "thread"),
            key=config_sort_key,
        )
        labels = [_label(k) for k in keys]
        warm = [summary.configs[k]["head_warm"] or 0.0 for k in keys]
        cold = [summary.configs[k]["head_cold"] or 0.0 for k in keys]
        plain = [summary.configs[k]["head_cold_raw"] or 0.0 for k in keys]
        x = list(range(len(keys)))
        ax.bar([i - 0.27 for i in x], warm, width=0.27, label="warm (same process)")
        ax.bar(x, cold, width=0.27, label="cold (fresh process, same stack)")
        if any(plain):
            ax.bar(
                [i + 0.27 for i in x], plain, width=0.27, label="cold, plain reader of that file"
            )
        ax.set_xticks(x, labels, rotation=35, ha="right", fontsize=7)
        ax.set_xlim(-0.7, max(len(keys), 3) - 0.3)  # a lone group keeps narrow bars
        ax.set_title(f"{backend}: head get_state, {turns}-turn thread")
        ax.set_ylabel("ms")
        ax.set_yscale("log")
        ax.grid(True, axis="y", which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def write_plots(summary: Summary, directory: Path) -> list[Path]:
    """Write the three PNG files into ``directory``; returns their paths.

    Raises ``PlotsUnavailableError`` when matplotlib is missing.
    """
    plt = _pyplot()
    directory.mkdir(parents=True, exist_ok=True)
    paths = [
        directory / "latency_vs_turns.png",
        directory / "storage_vs_turns.png",
        directory / "reads_cold_warm.png",
    ]
    _latency(plt, summary, paths[0])
    _storage(plt, summary, paths[1])
    _reads(plt, summary, paths[2])
    return paths
