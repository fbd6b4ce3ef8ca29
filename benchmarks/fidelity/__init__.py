"""Helpers of benchmarks/recorder_fidelity.py: truth statistics and the tools under test."""
