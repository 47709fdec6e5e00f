"""Benchmark support: synthetic workloads over real places."""

from .workload import WorkloadConfig, generate, write_jsonl

__all__ = ["WorkloadConfig", "generate", "write_jsonl"]
