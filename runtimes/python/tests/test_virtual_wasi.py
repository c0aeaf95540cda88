"""The virtual WASI's seed and random stream equal the Rust host's
(`virtual_wasi::tests::the_cross_runtime_vector_holds`) and the JS runtime's."""

import pytest

from ecdysis_harness.virtual_wasi import MAX_RANDOM_BYTES, SplitMix64, VirtualWasi, episode_seed


def test_the_cross_runtime_vector_holds():
    seed = episode_seed("tau2/retail", 30, 10)
    assert seed == 0xB8C0DFCBE7B30F65
    assert VirtualWasi(seed).bytes(12).hex() == "387d7f4dfd5fcadefaaddb5c"
    # Vigna's reference splitmix64 for seed 0.
    assert SplitMix64(0).next() == 0xE220A8397B1DCDAF


def test_random_bytes_are_capped():
    v = VirtualWasi(7)
    assert len(v.bytes(MAX_RANDOM_BYTES)) == MAX_RANDOM_BYTES
    with pytest.raises(ValueError, match="random bytes"):
        v.bytes(MAX_RANDOM_BYTES + 1)
