"""The chat flow: the LangGraph graph that answers one user message, its tools and its API."""

import core  # noqa: F401  (first: it prepares the environment LiteLLM reads at import time)
