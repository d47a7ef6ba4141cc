"""Subcommands that belong to no single part."""
