"""The throughput benchmark's stdlib-decoder variant decodes as the daemon does."""

from __future__ import annotations

import sys
from pathlib import Path

from monitor.config.schema import Config
from monitor.core.messages import RawRecord
from monitor.core.records import decode_scored

try:
    from benchmarks import throughput
except ImportError:  # plain `pytest` does not put the repository root on sys.path
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from benchmarks import throughput


def test_the_json_decoder_variant_decodes_a_batch_like_the_shipped_one() -> None:
    """It replaced the batch parser with one returning a plain list, which the decoder no
    longer takes (the benchmark stopped at its first daemon row)."""
    values = [b'{"id": "a", "score": 0.5}', b'{"id": "b", "score": 0.25, "payload": [1e400]}']
    raw = [RawRecord("predictions", 0, i, 1_763_700_000_000, None, v) for i, v in enumerate(values)]
    shipped = decode_scored(raw, Config())
    with throughput.json_decoder("json"):
        stdlib = decode_scored(raw, Config())
    assert stdlib[0].ids.tolist() == shipped[0].ids.tolist() == ["a"]
    assert [r.reason for r in stdlib[1]] == [r.reason for r in shipped[1]]
