"""Tests of each format's reader on its own: real files, files made by hand, bad files."""
