"""The tests of vitrio and cryovit: a package of packages, one for each part (`tests.core`,
`tests.formats`, ...), whose modules import what they share by package name.

`DM_SAMPLES` is the archive of real DigitalMicrograph files, with the arrays
another reader read from them, that the tests of the DM reader and the
fuzzer's seeds use. It lies beside the repository (`../shared/testdata`);
the tests that need it are skipped, saying so, where it is absent.
"""

from pathlib import Path

DM_SAMPLES = Path(__file__).resolve().parents[2] / "shared" / "testdata" / "dm-samples.tar.xz"
