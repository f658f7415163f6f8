"""Candidate providers: each backend offers candidates for a problem and prepares kernels."""
