"""CreateEmbedding: request -> plan (one input or a batch), run on a pooling model, response."""
