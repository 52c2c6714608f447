"""Collectors: probes that turn run directories and the live machine into typed facts (read-only)."""
