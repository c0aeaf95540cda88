"""Fixtures built by `bash runtimes/test.sh` (the host binary exports the
template and an evolved candidate, records their vectors and builds the
hostile guests) into target/runtimes-fixtures, or $ECDYSIS_FIXTURES."""

import os

# LiteLLM (under τ²) would fetch its model price map from the internet at
# import; the tests are offline.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
from pathlib import Path

import pytest

from ecdysis_harness import ToolSpec

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="session")
def fixtures() -> Path:
    path = Path(os.environ.get("ECDYSIS_FIXTURES", REPO / "target" / "runtimes-fixtures"))
    if not (path / "ready").exists():
        pytest.fail(f"no fixtures in {path}: run `bash runtimes/test.sh` (it builds them with the host binary)")
    return path


@pytest.fixture(scope="session")
def template_dir(fixtures: Path) -> Path:
    return fixtures / "template"


def sample_tools():
    """The tools of the Rust host's doctor and sandbox tests."""
    return [
        ToolSpec("get_order_details", "Get an order.", '{"type":"object","properties":{"order_id":{"type":"string"}}}', False),
        ToolSpec("get_user_details", "Get a user.", '{"type":"object","properties":{"user_id":{"type":"string"}}}', False),
        ToolSpec("cancel_pending_order", "Cancel an order.", '{"type":"object","properties":{"order_id":{"type":"string"},"reason":{"type":"string"}}}', True),
    ]
