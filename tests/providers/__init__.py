"""Tests of the reader providers."""
