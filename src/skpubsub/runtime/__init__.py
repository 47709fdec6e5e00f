"""Running one stream on several worker engines: dispatcher, workers, merger (issue 4)."""
