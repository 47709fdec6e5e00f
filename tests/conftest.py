import os

os.environ.setdefault("CI", "1")  # no progress bars in test output
