"""Differential tests: every way vitrio reads a file gives what a plain read of the same bytes gives.

The files are drawn by Hypothesis (every MRC mode and layout, TIFF strips, tiles,
codecs and BigTIFF), and so are the reads (patches that overlap, cross edges,
repeat, in any order). `make test` runs a bounded number of examples;
`make test-differential` (`VITRIO_DIFFERENTIAL=long`) runs many more.
"""
