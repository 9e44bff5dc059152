"""Test beds: the switches and networks the tests, benchmarks and runs use."""
