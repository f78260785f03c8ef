"""Catalog tests: every one runs on SQLite and on PostgreSQL."""
