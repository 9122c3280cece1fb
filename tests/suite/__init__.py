"""Tests of the test suite itself: the rules of CI, Hypothesis's profiles, and the list of mutants."""
