"""Verification: invariants of packed buffers and proof that nothing crosses a seam."""
