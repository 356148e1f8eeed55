"""What the per-runtime provider benchmarks share: warm-up, targets, and
medians and p90s in milliseconds."""

from __future__ import annotations

import statistics

WARMUP = 2  # turns run before measuring
TARGET_FIRST_DELTA_MS = 5.0  # agentd's added latency to the first text delta
TARGET_COMPLETION_MS = 2.0  # and from the runtime's turn end to the client's run.completed


def ms(seconds: float) -> float:
    return round(seconds * 1000, 3)


def median_ms(values: list[float]) -> float | None:
    return ms(statistics.median(values)) if values else None


def p90_ms(values: list[float]) -> float | None:
    return ms(sorted(values)[min(len(values) - 1, int(len(values) * 0.9))]) if values else None
