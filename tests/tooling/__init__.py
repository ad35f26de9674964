"""Tests of the development tools (benchmarks, fault harness), not of the library."""
