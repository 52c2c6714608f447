"""mldebug-rules: an evidence-before-action expert system for failing ML training runs."""

__version__ = "0.1.0"
