"""The load gauges read from a replica's /metrics, and the one load figure built from them."""

from __future__ import annotations

import pytest

from proxy.core.fleet.replicaload import Signal, load, parse_signal


def test_the_three_gauges_are_read_summed_over_models() -> None:
    text = """# HELP vllm:num_requests_running x
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="a b"} 3.0
vllm:num_requests_running{model_name="c"} 1
vllm:num_requests_waiting{model_name="a b"} 4.0 1700000000000
vllm:gpu_cache_usage_perc{model_name="a b"} 0.25
vllm:kv_cache_usage_perc{model_name="c"} 0.75
vllm:num_requests_running_total 99
vllm:prompt_tokens_total{model_name="c"} 12345
"""
    assert parse_signal(text, own_in_flight=2) == Signal(4.0, 4.0, 0.75, own_at_scrape=2)


@pytest.mark.parametrize("text", [
    "", "# only comments\n", "process_cpu_seconds_total 3\n",
    "vllm:num_requests_running{model_name=\"m\"} NaN\n",
    "vllm:num_requests_running{model_name=\"m\"} -1\n",
    "vllm:num_requests_running{model_name=\"m\"}\n",
    "<html>not metrics</html>",
])
def test_no_usable_gauge_is_no_signal(text: str) -> None:
    assert parse_signal(text, 0) is None


def test_unlabelled_samples_count_too() -> None:
    assert parse_signal("vllm:num_requests_waiting 2\n", 0) == Signal(0.0, 2.0, 0.0, 0)


def test_load_counts_our_requests_live_and_the_others_as_last_scraped() -> None:
    assert load(3, None) == 3.0
    seen = Signal(running=5, waiting=1, kv_usage=0.0, own_at_scrape=2)
    assert load(2, seen) == 6.0  # 2 ours + 4 others
    assert load(0, seen) == 4.0  # ours ended since
    assert load(0, Signal(1, 0, 0.0, own_at_scrape=3)) == 0.0  # never negative
    assert load(1, Signal(1, 0, 1.0, own_at_scrape=1)) == 2.0  # a full KV cache doubles it
