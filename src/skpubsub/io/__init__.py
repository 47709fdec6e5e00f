"""The edge: reading, validating and normalising events; writing outputs."""
