"""activeaudit-monitor: live F-measure of a production classifier from few audit labels."""

__version__ = "0.1.0"
