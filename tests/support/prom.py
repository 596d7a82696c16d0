"""Reading `/metrics` in tests with prometheus_client's own parser (what Prometheus reads)."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families


@dataclass(frozen=True)
class Scrape:
    types: dict[str, str]  # family name → counter, gauge, histogram, ...
    samples: dict[tuple[str, frozenset[tuple[str, str]]], float]

    def value(self, name: str, **labels: str) -> float | None:
        """A sample's value, None when the exposition has no such sample."""
        return self.samples.get((name, frozenset(labels.items())))

    def series(self, name: str) -> list[dict[str, str]]:
        """The label sets of every sample called `name`."""
        return [dict(labels) for sample, labels in self.samples if sample == name]


def parse(text: str) -> Scrape:
    types: dict[str, str] = {}
    samples: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
    for family in text_string_to_metric_families(text):
        types[family.name] = family.type
        for sample in family.samples:
            key = (sample.name, frozenset(sample.labels.items()))
            assert key not in samples, f"duplicate sample {key}"
            samples[key] = sample.value
    return Scrape(types, samples)
