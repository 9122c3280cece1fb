"""Tests of cryovit: its data types, its HDF5 plug-in and the path from files to batches."""
