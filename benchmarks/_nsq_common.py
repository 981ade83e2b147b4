"""Shared pieces of the NSQ benchmarks: the emulated nsqd in its own process."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator

PAYLOAD = b"x" * 100


@contextlib.contextmanager
def emulated_nsqd() -> Iterator[tuple[str, str]]:
    """Start ``python -m aioclients.testing._nsq_serve --nsqd 1``; yield (tcp, http)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "aioclients.testing._nsq_serve", "--nsqd", "1"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        tcp = http = ""
        for line in proc.stdout:
            if line.startswith("nsqd "):
                fields = dict(part.split("=", 1) for part in line.split()[1:])
                tcp, http = fields["tcp"], fields["http"]
            if line.strip() == "ready":
                break
        if not tcp:
            raise RuntimeError("the nsqd emulator did not start")
        yield tcp, http
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def report(title: str, results: dict[str, float]) -> None:
    """Print msgs/s per client and the ratios of aioclients to each peer."""
    print(f"\n{title}")
    ours = results.get("aioclients")
    for name, rate in results.items():
        ratio = (
            f"  (aioclients x{ours / rate:.2f})" if ours and name != "aioclients" and rate else ""
        )
        print(f"  {name:<12} {rate:>12,.0f} msgs/s{ratio}")
