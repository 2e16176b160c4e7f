"""kvviz's inference engine: a paged KV cache, prefix caching and continuous batching.

Each name is imported from the module it lives in (kvviz.engine.engine, .config, ...); the package
root re-exports the public ones (`from kvviz import Engine`)."""
