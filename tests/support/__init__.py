"""Helpers the test suites import: Hypothesis strategies and the real-process stacks."""
