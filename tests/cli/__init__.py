"""Tests of the `vitrio` command."""
