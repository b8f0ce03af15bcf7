"""Sundial's pure core: no I/O, no clock, no randomness."""
