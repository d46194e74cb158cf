"""``make bench``: the benchmarks of bsft_saga (not part of the test suite; see README.md)."""
