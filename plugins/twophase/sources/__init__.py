"""Sources: what a load reads, fixed at begin, continued exactly by the next load
(contract.py). Kinds: files (a folder), memory (tests); sources/kinds.py lists them."""

from .contract import Range, Source, SourceError, SourceReader

__all__ = ["Range", "Source", "SourceError", "SourceReader"]
