"""Core services shared by the whole app: settings, database, stores, language-model router."""

import os

# LiteLLM fetches its model cost map from the internet at import time unless told to use its
# bundled copy; with no network that fetch only delays every start. Set before anything imports it.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
