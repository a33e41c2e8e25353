"""Measurement: the shape grid, the network suites, the case list, device timing and the sweeper."""
