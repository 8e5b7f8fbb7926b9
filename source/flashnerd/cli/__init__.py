"""The `flashnerd` command line."""
