"""stagebench: a config-driven benchmark harness for multi-stage search ranking."""

__version__ = "0.1.0"
