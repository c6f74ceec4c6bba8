"""One normalizer per message shape: ``normalize(data) -> NormalizedMessage``.

Each module decides, for its format only, the role, the plain text and the typed columns of
each part; :mod:`.blocks` holds what the formats share (the envelope, content blocks → parts,
plain text). The entry point, detection and the finishing touches are in
:mod:`lossless.ingest.shapes`.
"""
