"""CreateCompletion: request -> plan (one prompt or a batch), run, response/chunks."""
