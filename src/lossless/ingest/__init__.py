"""Ingestion: message shapes → stored messages and parts; transcript importers; reconciliation."""
