"""Replaying the Rust host's vectors gives byte-identical lines, for the
template and for an evolved candidate from `ecdysis-host train`."""

import json

import pytest

from ecdysis_harness import Harness, VectorMismatch
from ecdysis_harness.vectors import replay


@pytest.mark.parametrize("name", ["template", "evolved", "template-py", "evolved-py"])
def test_replay_is_byte_identical(fixtures, name):
    harness = Harness.load(fixtures / name)
    report = replay(harness, fixtures / f"{name}.vectors.jsonl")
    assert report.header["harness"] == harness.hash
    assert report.records > 20 and report.episodes >= 2
    print(f"{name}: {report.records} hook calls of {report.episodes} episodes replayed byte for byte")


@pytest.mark.parametrize(
    "feature,needle,min_records",
    [
        # A harness-written call with 100 kB of arguments: the host's
        # violation, which this runtime must raise in the same lines.
        ("huge-args", '"violation":"arguments_too_large"', 8),
        # 1.2 MB env-view arguments: refused unread, logged as a marker.
        ("calc-bomb", "over the env view's cap of 65536", 8),
        # The episode's budget on text a harness adds: crossed at once by
        # the prompt (each episode ends at its contract hook), on the second
        # step by the injected notes.
        ("inflate-prompt", '"violation":"added_text_over_budget"', 4),
        ("inflate-inject", '"violation":"added_text_over_budget"', 8),
    ],
)
def test_hostile_vectors_replay_byte_identically(fixtures, feature, needle, min_records):
    path = fixtures / f"hostile.{feature}.vectors.jsonl"
    assert needle in path.read_text()
    harness = Harness.load(fixtures / "hostile" / f"{feature}.wasm")
    report = replay(harness, path)
    assert report.header["harness"] == harness.hash
    assert report.records >= min_records and report.episodes == 2


def test_the_evolved_candidate_differs_from_the_template(fixtures):
    evolved = json.loads((fixtures / "evolved" / "harness.json").read_text())
    template = json.loads((fixtures / "template" / "harness.json").read_text())
    assert evolved["hash"] != template["hash"]
    assert evolved["training"]["role"] == "incumbent"
    assert len(evolved["lineage"]) >= 2


def test_a_divergence_names_the_first_differing_record(fixtures, tmp_path):
    lines = (fixtures / "template.vectors.jsonl").read_text().splitlines()
    for i, line in enumerate(lines):
        record = json.loads(line) if i else None
        if record and record["hook"] == "realize" and record["output"]["val"] == {"tag": "proceed"}:
            lines[i] = line.replace('"val":{"tag":"proceed"}', '"val":{"tag":"block","val":"x"}')
            break
    tampered = tmp_path / "tampered.jsonl"
    tampered.write_text("\n".join(lines) + "\n")
    with pytest.raises(VectorMismatch, match=rf"tampered.jsonl:{i + 1}: .*`realize` differs") as err:
        replay(Harness.load(fixtures / "template"), tampered)
    assert "recorded:" in str(err.value) and "replayed:" in str(err.value)
