"""The trial table: its schema and validation, runs on disk, and synthetic sweeps."""
