"""Retrieval pieces: the local embedding model and (later) the web search pipeline."""
