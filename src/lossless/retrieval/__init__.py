"""The agent's recall tools over the store: grep (and, next, describe and expand)."""
