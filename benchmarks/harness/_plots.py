"""PNG plots of a run (matplotlib, Agg backend; the ``bench`` extra).

One panel per image, sized for a documentation column (about 680 px wide), with at most
seven lines or bar groups each, so that every label reads where the image is shown:

- ``latency_<backend>_<turns>t_F<F>.png``: per-turn latency against the turn number
  (rolling median of 10 turns, element-wise median over repetitions) of full mode and of
  delta mode at one snapshot frequency on the raw saver, the guard alone, the memory and
  Redis caches and the hand-written LRU; ``..._sharing.png``: the same against
  ``isolate: false`` and two workers alternating on one thread.
- ``storage_<backend>.png``: logical stored bytes against turns (log-log), one line per
  mode and snapshot frequency, sampled during the longest thread of each.
- ``reads_<backend>_<turns>t_F<F>.png``: head ``get_state`` warm (same process) and cold
  (a fresh process; for Redis also a plain reader of the same file), one bar group per
  stack, on the persistent backends.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from ._summary import ConfigKey, Summary, config_sort_key

__all__ = ["PlotsUnavailableError", "write_plots"]

ROLLING = 10
WIDTH = 6.8  # inches: the documentation column, so the fonts below read at their size
DPI = 120
MAIN = ("raw", "guard", "memory", "redis", "reference-lru")
SHARING = ("memory", "memory-shared", "redis", "redis-shared")
#: One colour per stack, the same in every image.
COLOURS = {
    "raw": "#222222",
    "guard": "#8c8c8c",
    "memory": "#1f77b4",
    "memory-shared": "#17becf",
    "redis": "#d62728",
    "redis-shared": "#ff9f4a",
    "reference-lru": "#2ca02c",
}
NAMES = {
    "raw": "raw saver",
    "guard": "guard only",
    "memory": "memory cache",
    "memory-shared": "memory cache, isolate: false",
    "redis": "Redis cache",
    "redis-shared": "Redis cache, isolate: false",
    "reference-lru": "hand-written LRU",
}


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

    plt.rcParams.update({"font.size": 10, "axes.titlesize": 11, "legend.fontsize": 9})
    return plt


def _label(key: ConfigKey) -> str:
    kind, _backend, _turns, _payload, stack, mode, _frequency = key
    two = ", 2 workers alternating" if kind == "alternating" else ""
    return f"{mode}, {NAMES.get(stack, stack)}{two}"


def _rolling_median(values: Sequence[float], width: int) -> list[float]:
    return [statistics.median(values[max(0, i - width + 1) : i + 1]) for i in range(len(values))]


def _elementwise_median(series: Sequence[Sequence[float]]) -> list[float]:
    n = min(len(s) for s in series)
    return [statistics.median(s[i] for s in series) for i in range(n)]


def _panels(summary: Summary) -> list[tuple[str, int, int]]:
    """(backend, turns, frequency) of every delta-mode group, in the tables' order."""
    keys = sorted((k for k in summary.configs if k[5] != "full"), key=config_sort_key)
    return list(dict.fromkeys((k[1], k[2], k[6] or 0) for k in keys))


def _members(
    summary: Summary, backend: str, turns: int, frequency: int, stacks: Iterable[str]
) -> list[ConfigKey]:
    """Full mode of the group, then its delta configurations at ``frequency`` on ``stacks``."""
    wanted = set(stacks)
    return sorted(
        (
            k
            for k in summary.configs
            if k[1] == backend
            and k[2] == turns
            and (k[5] == "full" or (k[6] == frequency and k[4] in wanted))
        ),
        key=config_sort_key,
    )


def _sharing(key: ConfigKey) -> bool:
    """Objects or a thread shared: ``isolate: false``, or two workers on one thread."""
    return key[4].endswith("-shared") or key[0] == "alternating"


def _figure(plt: Any, height: float) -> tuple[Any, Any]:
    # constrained: a legend placed outside the axes stays inside the image's width
    fig, ax = plt.subplots(figsize=(WIDTH, height), layout="constrained")
    return fig, ax


def _plain(axis: Any) -> None:
    """Log-scale ticks as plain numbers (``4``, ``20``, ``0.5``), not ``4 x 10^0``."""
    from matplotlib.ticker import FuncFormatter, LogLocator

    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    axis.set_minor_locator(LogLocator(subs=(2, 5)))
    axis.set_minor_formatter(FuncFormatter(lambda v, _: f"{v:g}"))


def _save(plt: Any, fig: Any, path: Path) -> Path:
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def _latency(
    plt: Any, summary: Summary, keys: Sequence[ConfigKey], title: str, path: Path
) -> Path | None:
    curves = []
    for key in keys:
        series = [r["latencies_ms"] for r in summary.configs[key]["rows"] if r.get("latencies_ms")]
        if series:
            curves.append((key, _rolling_median(_elementwise_median(series), ROLLING)))
    if len(curves) < 2:
        return None  # one line compares nothing
    fig, ax = _figure(plt, 4.4 + 0.18 * len(curves))
    for key, y in curves:
        style = "--" if key[5] == "full" else (":" if key[0] == "alternating" else "-")
        colour = COLOURS.get(key[4])
        ax.plot(range(1, len(y) + 1), y, style, color=colour, label=_label(key), linewidth=1.6)
    ax.set_title(title)
    ax.set_xlabel("turn")
    ax.set_ylabel(f"ms per turn (rolling median of {ROLLING})")
    ax.set_yscale("log")
    _plain(ax.yaxis)
    ax.grid(True, which="both", alpha=0.3)
    fig.legend(loc="outside lower left", ncol=2, frameon=False)
    return _save(plt, fig, path)


def _storage(plt: Any, summary: Summary, backend: str, path: Path) -> Path | None:
    # storage does not depend on the stack: one curve per mode and cadence, from the
    # longest thread's in-run samples (raw stack preferred)
    curves: dict[tuple[int, str], tuple[tuple[int, bool], list[tuple[int, float]]]] = {}
    for key, c in summary.configs.items():
        if key[1] != backend or key[0] != "thread":
            continue
        rows = c["rows"]
        samples = next((r["storage_by_turns"] for r in rows if r.get("storage_by_turns")), None)
        if not samples:
            continue
        curve = (key[6] or 0, "full" if key[5] == "full" else f"delta, F={key[6]}")
        rank = (key[2], key[4] == "raw")
        if curve not in curves or rank > curves[curve][0]:
            curves[curve] = (rank, sorted((n, b) for n, b in samples if b))
    if not curves:
        return None
    fig, ax = _figure(plt, 4.2)
    for (_cadence, label), (_rank, points) in sorted(curves.items()):
        style = "o--" if label == "full" else "o-"
        ax.plot([p[0] for p in points], [p[1] / 1e6 for p in points], style, label=label)
    ax.set_title(f"{backend}: stored bytes (logical) against thread length")
    ax.set_xlabel("turns")
    ax.set_ylabel("MB")
    ax.set_xscale("log")
    ax.set_yscale("log")
    _plain(ax.xaxis)
    _plain(ax.yaxis)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="upper left")
    return _save(plt, fig, path)


def _reads(
    plt: Any, summary: Summary, keys: Sequence[ConfigKey], title: str, path: Path
) -> Path | None:
    keys = [k for k in keys if k[0] == "thread" and summary.configs[k]["head_cold"] is not None]
    if len(keys) < 2:
        return None
    kinds = (
        ("head_warm", "warm (same process)"),
        ("head_cold", "cold (fresh process, same stack)"),
        ("head_cold_raw", "cold, plain reader of that file"),
    )
    bars = [b for b in kinds if any(summary.configs[k][b[0]] for k in keys)]
    fig, ax = _figure(plt, 1.8 + 0.42 * len(keys))
    height = 0.8 / len(bars)
    for i, (metric, label) in enumerate(bars):
        ys = [n + (i - (len(bars) - 1) / 2) * height for n in range(len(keys))]
        values = [summary.configs[k][metric] or 0.0 for k in keys]
        ax.barh(ys, values, height=height, label=label)
    ax.set_yticks(range(len(keys)), [_label(k) for k in keys])
    ax.invert_yaxis()  # the tables' order, top to bottom
    ax.set_xscale("log")
    ax.set_xlabel("head get_state, ms (log scale)")
    _plain(ax.xaxis)
    ax.set_title(title)
    ax.grid(True, axis="x", which="both", alpha=0.3)
    fig.legend(loc="outside lower left", frameon=False)
    return _save(plt, fig, path)


def write_plots(summary: Summary, directory: Path) -> list[Path]:
    """Write the PNG files into ``directory``; returns their paths, in the tables' order.

    Raises ``PlotsUnavailableError`` when matplotlib is missing.
    """
    plt = _pyplot()
    directory.mkdir(parents=True, exist_ok=True)
    written: list[Path | None] = []
    for backend, turns, f in _panels(summary):
        name = f"{backend}_{turns}t_F{f}"
        head = f"{backend}, {turns}-turn threads, F={f}"
        written += [
            _latency(
                plt,
                summary,
                [k for k in _members(summary, backend, turns, f, MAIN) if k[0] == "thread"],
                f"{head}: per-turn latency",
                directory / f"latency_{name}.png",
            ),
            _latency(
                plt,
                summary,
                [k for k in _members(summary, backend, turns, f, SHARING) if k[4] != "guard"],
                f"{head}: isolate: false, two workers",
                directory / f"latency_{name}_sharing.png",
            )
            if any(_sharing(k) for k in _members(summary, backend, turns, f, SHARING))
            else None,
            _reads(
                plt,
                summary,
                _members(summary, backend, turns, f, MAIN + SHARING),
                f"{head}: head read",
                directory / f"reads_{name}.png",
            ),
        ]
    backends = dict.fromkeys(k[1] for k in sorted(summary.configs, key=config_sort_key))
    written += [_storage(plt, summary, b, directory / f"storage_{b}.png") for b in backends]
    return [p for p in written if p is not None]
