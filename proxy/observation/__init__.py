"""Observation: metrics, logs, request ids and traces."""
