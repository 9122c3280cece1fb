"""Tests of the scratch: images kept in RAM, in a mapped file or in a shared directory."""
