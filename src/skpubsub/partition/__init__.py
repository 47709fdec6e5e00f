"""Partitioning subscriptions across workers: statistics, cost models, planners (issue 4)."""
