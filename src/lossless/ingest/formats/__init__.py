"""The transcript formats lossless imports, one module per host."""
