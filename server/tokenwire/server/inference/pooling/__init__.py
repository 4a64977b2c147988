"""What a pooling model serves: CreateEmbedding (/v1/embeddings) and
Classify (/classify): request -> plan (one input or a batch), run, response."""
