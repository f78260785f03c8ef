"""Revision scripts, one per schema change; ``0001`` creates the first schema."""
