"""What Claude's ``result`` lines say its models used, as ``Usage`` increments.

Claude Code 2.1.332 states, on each ``result``, per model:
``model_usage_since_last_result`` — the calls this process counted since its
previous result, which is exactly an increment (its own docs: "sum it over a
conversation's results") — and ``modelUsage``, the running total of the
query, which a resumed session starts from its transcript's totals. The
first is used where it is there; without it (an older runtime) the growth of
``modelUsage`` since this process's previous result is, the first result of
a process taken whole.

Anthropic counts input apart from the prompt cache: agentd's input is
``inputTokens + cacheReadInputTokens + cacheCreationInputTokens`` and its
cached input the cache reads; its reasoning is ``thinkingTokens`` (output
tokens, as Anthropic bills them; 0 where absent).
"""

from __future__ import annotations

from typing import Any

from .base import Usage

#: the token counts of one model's entry
_COUNTS = ("inputTokens", "outputTokens", "cacheReadInputTokens", "cacheCreationInputTokens", "thinkingTokens")


def _counts(entry: Any) -> dict[str, int]:
    if not isinstance(entry, dict):
        return dict.fromkeys(_COUNTS, 0)
    return {key: value if isinstance(value := entry.get(key), int) and value > 0 else 0 for key in _COUNTS}


def _increments(message: dict[str, Any], totals: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
    """Model -> its counts since the previous result; ``totals`` (the
    previous result's ``modelUsage`` in this process) is brought up to date."""
    since = message.get("model_usage_since_last_result")
    running = message.get("modelUsage")
    previous = dict(totals)
    if isinstance(running, dict):
        totals.clear()
        totals.update({str(model): _counts(entry) for model, entry in running.items()})
    if isinstance(since, dict):
        return {str(model): _counts(entry) for model, entry in since.items()}
    if not isinstance(running, dict):
        return {}
    zero = dict.fromkeys(_COUNTS, 0)
    return {model: {key: max(0, now[key] - previous.get(model, zero)[key]) for key in _COUNTS}
            for model, now in totals.items()}


def result_usage(message: dict[str, Any], attempt_id: str | None, totals: dict[str, dict[str, int]]) -> list[Usage]:
    """The Usage increments a ``result`` line states, one per model that used any."""
    out = []
    for model, counts in _increments(message, totals).items():
        cached = counts["cacheReadInputTokens"]
        usage = Usage(
            attempt_id=attempt_id, model=model, output_tokens=counts["outputTokens"], cached_input_tokens=cached,
            reasoning_tokens=min(counts["thinkingTokens"], counts["outputTokens"]),
            input_tokens=counts["inputTokens"] + cached + counts["cacheCreationInputTokens"],
        )
        if usage.input_tokens or usage.output_tokens:
            out.append(usage)
    return out
