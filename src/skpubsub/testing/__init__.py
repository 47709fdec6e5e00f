"""The reference engine (SPEC.md made executable) and conformance helpers."""
