"""The bottom layer: errors, engine-neutral domain types, settings, serving
state, metrics, admission bounds, validation helpers, model paths. Imports
nothing else of the server."""
