"""The local model: its weights (`weights`), its own process (`serve`, started and shared by
`process`), the machine-wide request queue (`queue`) and LiteLLM's client for it (`provider`)."""
