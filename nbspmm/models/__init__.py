"""Models built from nbspmm's layers (need torch: ``pip install nbspmm[torch]``)."""
