"""Ready-made integrations with agent hosts (Claude Code hooks, ...).

Each module is imported on its own (``from lossless.integrations import claude_code``), so a
host's integration never costs the others their imports.
"""
