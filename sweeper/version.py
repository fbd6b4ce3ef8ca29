"""sweeper's version: a leaf every stage can import without importing the library's face."""

__version__ = "0.1.0"
