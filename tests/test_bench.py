"""The benchmark harness: matrix, pairing, size cap, end-to-end runs, digest failures,
summaries and plots. No timing is asserted anywhere: only structure and verdict logic."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import pytest
from benchmarks.harness import main, parse_size
from benchmarks.harness._cases import (
    PRESETS,
    SCHEMA_VERSION,
    Case,
    Sweep,
    apply_cap,
    estimated_bytes,
    pair_rows,
    plan_order,
    unique_cases,
)
from benchmarks.harness._runner import digest_mismatches, latency_summary
from benchmarks.harness._summary import (
    README_BEGIN,
    README_END,
    load_rows,
    rewrite_readme,
    summarize,
)

from tests.support.services import PG_URL, REDIS_URL, service_unavailable


def _records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _row(
    mode: str, stack: str, frequency: int | None, rep: int = 0, **extra: Any
) -> dict[str, Any]:
    case = Case("sqlite", 300, 400, "thread", mode, stack, frequency)
    return {"type": "case", "status": "ok", "repetition": rep, **case.fields(), **extra}


# -- the matrix ----------------------------------------------------------------------------


def test_every_full_row_pairs_with_every_delta_cadence() -> None:
    cadences = (1, 7, 10, 1000)
    rows = [_row("full", "raw", None), _row("full", "guard", None)]
    rows += [_row("delta", s, f) for f in cadences for s in ("raw", "memory")]
    rows += [_row("delta", "raw", 10, rep=1)]  # another repetition: never paired with rep 0
    pairs = pair_rows(rows)
    seen = {(f["stack"], d["stack"], d["frequency"]) for f, d in pairs}
    assert seen == {
        (fs, ds, f) for fs in ("raw", "guard") for ds in ("raw", "memory") for f in cadences
    }
    assert len(pairs) == 2 * 2 * len(cadences)
    assert all(f["repetition"] == d["repetition"] == 0 for f, d in pairs)


def test_pairing_ignores_failed_and_two_process_rows() -> None:
    rows = [
        _row("full", "raw", None),
        _row("delta", "raw", 10),
        {**_row("delta", "memory", 10), "status": "timeout"},
        {**_row("delta", "redis", 10), "kind": "alternating"},
    ]
    assert [(f["stack"], d["stack"]) for f, d in pair_rows(rows)] == [("raw", "raw")]


def test_sweep_has_a_raw_full_reference_and_caches_only_in_delta() -> None:
    sweep = Sweep(
        "s", ("memory", "sqlite"), (10,), (1, 1000), ("memory", "redis"), two_process=("sqlite",)
    )
    cases = sweep.cases()
    full = [c for c in cases if c.mode == "full"]
    assert {(c.backend, c.stack) for c in full} == {("memory", "raw"), ("sqlite", "raw")}
    assert {c.stack for c in cases if c.mode == "delta" and c.kind == "thread"} == {
        "memory",
        "redis",
    }
    alternating = [c for c in cases if c.kind == "alternating"]
    assert {(c.backend, c.frequency) for c in alternating} == {("sqlite", 1), ("sqlite", 1000)}
    assert not any(c.cold_reads for c in cases if c.backend == "memory")
    assert len({c.case_id for c in cases}) == len(cases)


def test_order_alternates_between_repetitions() -> None:
    cases = unique_cases(PRESETS["quick"].sweeps)
    plan = plan_order(cases, 3)
    reps = [[c for r, c in plan if r == rep] for rep in range(3)]
    assert reps[0] == cases and reps[1] == cases[::-1] and reps[2] == cases
    full_first = [
        [c.mode for c in rep if c.group == cases[0].group].index("full")
        < [c.mode for c in rep if c.group == cases[0].group].index("delta")
        for rep in reps
    ]
    assert full_first == [True, False, True]


def test_size_cap_skips_large_cases_unless_allowed() -> None:
    small = Case("sqlite", 10, 400, "thread", "full", "raw", None)
    big = Case("sqlite", 1000, 400, "thread", "full", "raw", None)
    lean = Case("sqlite", 1000, 400, "thread", "delta", "raw", 1000)
    assert estimated_bytes(big) > 2**30 > estimated_bytes(lean)
    run, skipped = apply_cap([small, big, lean], 2**30)
    assert run == [small, lean]
    assert [c for c, _ in skipped] == [big] and "--allow-large" in skipped[0][1]
    assert apply_cap([small, big, lean], 2**30, allow_large=True) == ([small, big, lean], [])
    assert apply_cap([small], 1)[0] == []


def test_cap_on_the_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [
        "run",
        "--backends",
        "sqlite",
        "--stacks",
        "raw",
        "--turns",
        "10,1000",
        "--frequencies",
        "1000",
    ]
    assert main([*argv, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "skip  thread:sqlite/1000t/400B:raw:full" in out
    assert "run   thread:sqlite/1000t/400B:raw:delta-F1000" in out
    assert main([*argv, "--dry-run", "--allow-large"]) == 0
    assert "skip " not in capsys.readouterr().out
    assert main([*argv, "--dry-run", "--max-full-bytes", "100KB"]) == 0
    assert "skip  thread:sqlite/10t/400B:raw:full" in capsys.readouterr().out


def test_latency_windows_and_percentiles() -> None:
    lat = [float(i) for i in range(1, 101)]
    s = latency_summary(lat)
    assert (s["first"], s["middle"], s["last"], s["window"]) == (5.5, 50.5, 95.5, 10)
    assert (s["p95"], s["p99"]) == (95.0, 99.0)
    assert latency_summary([3.0, 1.0, 2.0])["window"] == 1


def test_bad_usage_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--backends", "oracle"]) == 2
    assert main(["--preset", "quick", "--turns", "10"]) == 2
    assert main(["--max-full-bytes", "lots"]) == 2
    assert main(["summarize", "/nonexistent/bench.jsonl"]) == 2
    assert parse_size("1GiB") == 2**30 and parse_size("500MB") == 500 * 10**6
    capsys.readouterr()


def test_digest_check_flags_the_odd_rows_out() -> None:
    rows = [
        _row("full", "raw", None, digest="a", backend="memory"),
        _row("delta", "raw", 10, digest="a"),
        _row("delta", "memory", 10, digest="b"),
        {**_row("delta", "redis", 10, digest="zzz"), "turns": 301},  # another conversation
    ]
    assert [m["case_id"] for m in digest_mismatches(rows)] == [rows[2]["case_id"]]


# -- end to end ----------------------------------------------------------------------------


def _services() -> tuple[list[str], list[str]]:
    """Backends and stacks to run: PostgreSQL and Redis when reachable (CI: required)."""
    backends, stacks = ["memory", "sqlite"], ["raw", "memory", "reference-lru"]
    try:
        import psycopg

        psycopg.connect(PG_URL, connect_timeout=3).close()
        backends.append("postgres")
    except Exception as exc:
        with contextlib.suppress(pytest.skip.Exception):  # locally: run without it
            service_unavailable(f"PostgreSQL at {PG_URL}", exc)
    try:
        import redis

        redis.Redis.from_url(REDIS_URL, socket_timeout=3).ping()
        stacks.append("redis")
    except Exception as exc:
        with contextlib.suppress(pytest.skip.Exception):  # locally: run without it
            service_unavailable(f"Redis at {REDIS_URL}", exc)
    return backends, stacks


@pytest.mark.postgres
@pytest.mark.redis
def test_end_to_end_run_summary_plots_and_readme(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    backends, stacks = _services()
    out = tmp_path / "results"
    argv = [
        "run",
        "--backends", ",".join(backends),
        "--stacks", ",".join(stacks),
        "--turns", "6",
        "--frequencies", "3",
        "--repetitions", "1",
        "--out", str(out),
        "--pg-url", PG_URL,
        "--redis-url", REDIS_URL,
        "--no-progress",
    ]  # fmt: skip
    assert main(argv) == 0, capsys.readouterr()
    records = _records(out / "bench.jsonl")
    assert {r["schema_version"] for r in records} == {SCHEMA_VERSION}
    assert records[0]["type"] == "run" and records[-1]["type"] == "end"
    assert records[-1]["status"] == "ok" and records[-1]["digest_mismatches"] == []
    cases = [r for r in records if r["type"] == "case"]
    assert {r["status"] for r in cases} == {"ok"}
    assert {r["backend"] for r in cases} == set(backends)
    assert len({r["digest"] for r in cases}) == 1  # every mode, stack and backend agrees
    for r in cases:
        assert len(r["latencies_ms"]) == 6 and r["messages"] == 12
        assert set(r["latency_ms"]) >= {"p50", "p95", "p99", "first", "middle", "last"}
        assert r["storage"]["logical_bytes"] > 0 and r["peak_rss_bytes"] > 0
        assert r["inner_calls"]["put"] > 0
        if r["backend"] != "memory" and r["kind"] == "thread":
            assert r["head_cold_ms"] is not None and r["storage"]["file_bytes"] > 0
        if r["kind"] == "thread":
            assert r["cpu_ms_p50"] > 0
        if r["stack"] in ("memory", "redis"):
            assert set(r["cache"]["stats"]) >= {"hits", "misses", "evictions", "errors"}
        if r["stack"] == "reference-lru":
            assert r["cache"]["bytes"] > 0 and r["cache"]["stats"]["hits"] > 0
        if r["stack"] == "redis" and r["kind"] == "thread":
            per_turn = r["redis_per_turn"]
            assert len(per_turn) == 6 and all(c > 0 and s > 0 for c, s, _ in per_turn)
    if "redis" in stacks:
        assert any(r["kind"] == "alternating" for r in cases)
        assert all(
            r["head_cold_raw_ms"] is not None
            for r in cases
            if r["stack"] == "redis" and r["kind"] == "thread" and r["backend"] != "memory"
        )
    assert (out / "summary.json").exists() and (out / "summary.md").exists()

    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\nbefore\n\n{README_BEGIN}\nold\n{README_END}\n\nafter\n")
    plots = tmp_path / "docs" / "bench"
    assert main(["summarize", str(out), "--plots", str(plots), "--readme", str(readme)]) == 0
    printed = capsys.readouterr().out
    assert "delta / full" in printed and "wrapped / raw" in printed
    assert "| group | ratio | p50 | cpu | last |" in printed  # the wrapped / raw table
    assert "| sqlite/6t/400B | raw delta F=3 / raw full |" in printed
    pngs = {p.name for p in plots.glob("*.png")}
    persistent = [b for b in backends if b != "memory"]
    assert pngs >= {
        *(f"latency_{b}_6t_F3.png" for b in backends),
        *(f"storage_{b}.png" for b in backends),
        *(f"reads_{b}_6t_F3.png" for b in persistent),
    }
    assert ("latency_sqlite_6t_F3_sharing.png" in pngs) == ("redis" in stacks)  # 2 workers
    for name in pngs:
        png = (plots / name).read_bytes()
        assert png.startswith(b"\x89PNG")
        # one panel a documentation column (about 680 px) shows near full size
        assert int.from_bytes(png[16:20], "big") <= 820, name
    text = readme.read_text()
    assert text.startswith("# x\n\nbefore\n\n") and text.endswith("\n\nafter\n")
    assert "\nold\n" not in text
    assert all(f"](docs/bench/{name})" in text for name in pngs)
    assert "checkpoint-guard bench --backends" in text
    # the speed targets need SQLite threads of 300+ turns at F=1000: not measured here
    assert "not measured" in text


def test_a_digest_mismatch_fails_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [
        "--backends", "memory", "--stacks", "raw,memory", "--turns", "4", "--frequencies", "2",
        "--repetitions", "1", "--out", str(tmp_path), "--no-progress",
        "--inject-digest-fault", "memory",
    ]  # fmt: skip
    assert main(argv) == 1
    end = _records(tmp_path / "bench.jsonl")[-1]
    assert end["status"] == "failed"
    assert [m["case_id"] for m in end["digest_mismatches"]] == [
        "thread:memory/4t/400B:memory:delta-F2"
    ]
    assert "DIGEST MISMATCH" in capsys.readouterr().out
    assert main(["summarize", str(tmp_path)]) == 1


def test_a_case_past_its_timeout_fails_the_run(tmp_path: Path) -> None:
    argv = [
        "--backends", "memory", "--stacks", "raw", "--turns", "3", "--frequencies", "2",
        "--repetitions", "1", "--out", str(tmp_path), "--no-progress", "--timeout", "0.05",
    ]  # fmt: skip
    assert main(argv) == 1
    cases = [r for r in _records(tmp_path / "bench.jsonl") if r["type"] == "case"]
    assert {r["status"] for r in cases} == {"timeout"}


def test_summarizer_refuses_another_schema_version(tmp_path: Path) -> None:
    path = tmp_path / "bench.jsonl"
    path.write_text(json.dumps({"schema_version": SCHEMA_VERSION + 1, "type": "run"}) + "\n")
    assert main(["summarize", str(path)]) == 2


def test_targets_verdicts_from_synthetic_rows() -> None:
    def lat(first: float, last: float) -> dict[str, float]:
        return {"first": first, "last": last, "p50": last, "middle": last}

    header = {"schema_version": SCHEMA_VERSION, "type": "run", "argv": []}
    rows: list[dict[str, Any]] = [header]
    for rep in range(2):
        rows += [
            _row("full", "raw", None, rep, latency_ms=lat(7, 40), head_warm_ms=10.0, digest="d"),
            _row("delta", "memory", 1000, rep, latency_ms=lat(7, 8), head_warm_ms=1.0, digest="d"),
            _row("delta", "redis", 1000, rep, latency_ms=lat(8, 10), head_warm_ms=2.0, digest="d"),
            {
                **_row("delta", "redis", 1000, rep, latency_ms=lat(8, 20), digest="d"),
                "kind": "alternating",
            },
            {
                **_row(
                    "delta",
                    "redis",
                    1000,
                    rep,
                    digest="f",
                    head_cold_ms=30.0,
                    head_cold_raw_ms=100.0,
                ),
                "turns": 999,
                "group": "sqlite/999t/400B",
            },
        ]
    rows = [{**r, "schema_version": SCHEMA_VERSION} for r in rows]
    targets = {t.name: t for t in summarize(rows).targets}
    values = {name: (round(t.value or 0, 3), t.met) for name, t in targets.items()}
    assert values == {
        "memory cache: last-10 / first-10 per turn": (round(8 / 7, 3), True),
        "memory cache last-10 / raw full last-10": (0.2, True),
        "memory cache head get_state / raw full": (0.1, True),
        "fresh process, Redis warm / raw delta head read": (0.3, False),
        "two workers alternating / one (Redis), last-10": (2.0, False),
    }


def test_rewrite_readme_needs_exactly_one_block(tmp_path: Path) -> None:
    from benchmarks.harness._summary import SummaryError

    readme = tmp_path / "README.md"
    readme.write_text("no markers\n")
    with pytest.raises(SummaryError):
        rewrite_readme(readme, "x")
    readme.write_text(f"a\n{README_BEGIN}\n1\n{README_END}\nb\n{README_BEGIN}\n2\n{README_END}\n")
    with pytest.raises(SummaryError):
        rewrite_readme(readme, "x")


def test_load_rows_reads_a_directory(tmp_path: Path) -> None:
    (tmp_path / "bench.jsonl").write_text(
        json.dumps({"schema_version": SCHEMA_VERSION, "type": "run"}) + "\n"
    )
    assert load_rows(tmp_path)[0]["type"] == "run"
