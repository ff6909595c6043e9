"""A run's lifecycle on disk and in the process table: its folder, its records, how it stops."""
