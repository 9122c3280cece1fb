"""Tests of the shape of the code: every module imports alone, and no layer imports a higher one."""
