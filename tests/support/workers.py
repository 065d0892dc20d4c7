"""``Workers``: worker processes (``tests/support/scaleout_worker.py``) a test starts
together, pauses at barriers and collects (stderr to files, so a chatty worker
never blocks on a full pipe)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import IO, Any

ROOT = Path(__file__).resolve().parents[2]


class Workers:
    """One process per spec; ``go()`` releases them all at once."""

    def __init__(self, specs: list[dict[str, Any]]) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("CHECKPOINT_GUARD_")}
        env["PYTHONPATH"] = str(ROOT)
        self.errs: list[IO[str]] = []
        self.procs: list[subprocess.Popen[str]] = []
        for spec in specs:
            err = tempfile.TemporaryFile("w+")  # noqa: SIM115 - closed in close()
            self.errs.append(err)
            self.procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "tests.support.scaleout_worker", json.dumps(spec)],
                    cwd=ROOT,
                    env=env,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=err,
                    text=True,
                )
            )

    def _stderr(self, i: int) -> str:
        self.errs[i].seek(0)
        return self.errs[i].read()[-4000:]

    def go(self) -> None:
        """Release every worker (start, or leave a barrier)."""
        for proc in self.procs:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()

    def wait_paused(self) -> list[Any]:
        """Until every worker reports it waits at a barrier (its report each)."""
        out = []
        for i, proc in enumerate(self.procs):
            assert proc.stdout is not None
            line = proc.stdout.readline()
            assert line, f"worker {i} ended before its barrier:\n{self._stderr(i)}"
            out.append(json.loads(line))
        return out

    def results(self, timeout: float = 600) -> list[dict[str, Any]]:
        """Every worker's final report (fails with its stderr if one failed); the
        timeout only bounds a hang."""
        outs = []
        for i, proc in enumerate(self.procs):
            out, _ = proc.communicate(timeout=timeout)
            assert proc.returncode == 0, self._stderr(i)
            outs.append(json.loads(out.strip().splitlines()[-1]))
        return outs

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        for err in self.errs:
            err.close()
