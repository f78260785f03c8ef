"""CLI tests: every command as a user runs it."""
