"""A deterministic in-process engine (and its control half) for fast tests of the serving layer."""
