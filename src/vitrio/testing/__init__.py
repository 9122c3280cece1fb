"""Helpers for testing vitrio and formats of one's own: synthetic files of formats vitrio only reads."""
