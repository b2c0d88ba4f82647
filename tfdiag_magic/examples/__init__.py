"""Example training scripts bundled with the package (used by ``python -m tfdiag_magic demo``)."""
