"""CreateChatCompletion: request -> plan, run on the engine, response/chunks."""
