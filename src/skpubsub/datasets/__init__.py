"""Real-data loaders: places with coordinates and keywords, read from installed packages."""

from .geonames import DATASETS, MAX_KEYWORDS, Places, data_path, load

__all__ = ["DATASETS", "MAX_KEYWORDS", "Places", "data_path", "load"]
